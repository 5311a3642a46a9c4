"""The house rules that a reader of the code relies on, checked: sizes, the façade, schema."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mint import api
from mint.db import SCHEMA_HEAD, head_revision

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for d in ("store", "mint", "runtime") for p in (ROOT / d).rglob("*.py"))
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 500, 50


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_and_functions_stay_small(path):
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_MODULE_LINES
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(text))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == []


def test_facade_lists_every_operation_and_each_resolves():
    assert api.__all__ == sorted(api._OPERATIONS)
    for name in api.__all__:
        assert callable(getattr(api, name)), name
        assert name in api.__doc__, f"{name} is missing from mint.api's docstring"


def test_schema_head_constant_matches_the_migrations():
    assert SCHEMA_HEAD == head_revision()
