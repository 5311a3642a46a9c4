"""The house rules that a reader of the code relies on, checked: sizes, the façade, schema,
and the tests' own layout (helpers in tests/support, fixtures in conftest.py)."""

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


def _imports(path: Path) -> set[str]:
    """The absolute modules PATH imports, at its top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_test_modules_share_helpers_through_support_and_conftest_only():
    """A test module imports no other test module (its fixtures would run twice, its helpers
    hide in a file named for something else); shared helpers live in tests/support, shared
    fixtures in conftest.py, and tests/support imports neither tests nor conftest."""
    tests = ROOT / "tests"
    test_modules = {p.stem for p in tests.glob("*.py")} - {"conftest"}
    wrong = {}
    for path in sorted(tests.rglob("*.py")):
        in_support = path.parent.name == "support"
        bad = sorted(
            name
            for name in _imports(path)
            if name.split(".")[0] in test_modules | {"tests"}
            or (in_support and name.split(".")[0] == "conftest")
        )
        if bad:
            wrong[str(path.relative_to(tests))] = bad
    assert wrong == {}
