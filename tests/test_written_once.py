"""Each operation is written once (issue 20): the porcelain over a backend, one builder of a
commit, one test of "is this a registry?". These read the source, so a second copy fails here
before it can drift from the first."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from mint import api
from mint.backend.local import REPOSITORY_OPERATIONS

ROOT = Path(__file__).resolve().parents[1]
CODE = sorted(
    p for d in ("store", "mint", "runtime", "examples", "bench") for p in (ROOT / d).rglob("*.py")
)
PORCELAIN = sorted(n for n, (_, _, how) in api._OPERATIONS.items() if how == api._ONCE)


def _defined(path: Path) -> set[str]:
    """The names a module defines at its top level."""
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_the_porcelain_is_the_one_place_for_client_side_operations():
    assert {"commit", "set_commit", "set_derive", "candidates", "checkout", "export"} <= set(
        PORCELAIN
    )
    assert {"evaluate", "set_spec"} <= set(PORCELAIN)
    for name in PORCELAIN:
        module = api._OPERATIONS[name][0]
        assert module.startswith("mint.porcelain."), (name, module)
    # the client (mint/remote) and the layers below the façade; the CLI's commands and the
    # registry's routes are doors named after the operations they call, not second copies
    doors = {"porcelain", "cli", "registry", "examples", "bench"}
    twins = {
        f"{_rel(p)}: {name}"
        for p in CODE
        if not doors & set(p.relative_to(ROOT).parts)
        for name in _defined(p) & set(PORCELAIN)
    }
    assert twins == set(), "a client-side operation is written a second time"


def test_the_client_holds_one_thin_call_per_operation_the_repository_owns():
    from mint.remote import calls as operations

    assert set(operations.__all__) <= set(REPOSITORY_OPERATIONS) | {"latest_evaluation"}
    owned = {n for n, (_, _, how) in api._OPERATIONS.items() if how == api._ANY}
    assert owned <= set(REPOSITORY_OPERATIONS), owned - set(REPOSITORY_OPERATIONS)
    missing = {n for n in REPOSITORY_OPERATIONS if not hasattr(operations, n)}
    assert missing == set(), f"no call to the registry for {sorted(missing)}"


TESTS = sorted(p for p in (ROOT / "tests").rglob("*.py") if p.name != Path(__file__).name)


@pytest.mark.parametrize("path", CODE + TESTS, ids=_rel)
def test_a_commit_is_built_only_by_its_builder(path):
    text = path.read_text()
    uses = [m.start() for m in re.finditer(r"\bNewCommit\(", text)]
    if _rel(path) == "mint/commits/rows.py":
        body = text[text.index("def build_commit(") :]
        body = body[: body.index("\ndef ", 1)]
        assert len(uses) == 1 and "NewCommit(" in body, "NewCommit( outside build_commit"
    else:
        assert uses == [], f"{_rel(path)} builds a NewCommit itself: use rows.build_commit"


def test_local_or_remote_is_told_in_one_place():
    urls = [
        _rel(p)
        for p in CODE
        if p.name != "test_written_once.py" and '"http://", "https://"' in p.read_text()
    ]
    assert urls == ["mint/ids.py"]
    dispatch = [_rel(p) for p in CODE if "mint.remote.calls" in p.read_text()]
    assert dispatch == ["mint/remote/backend.py"], dispatch


def _package(path: Path) -> str:
    """The dotted package PATH's module belongs to (store/ and runtime/ are mint's)."""
    parts = list(path.relative_to(ROOT).parent.parts)
    return ".".join(["mint", *parts] if parts and parts[0] in ("store", "runtime") else parts)


def test_nothing_imports_another_module_s_private_names():
    """A private name stays in its module; a package's private submodules (mint.objects's
    `_commits`, mint.schema's) are for that package's own modules alone."""
    found = []
    for path in CODE:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mint"):
                own = node.module == _package(path)
                found += [
                    f"{_rel(path)}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__") and not own
                ]
    assert found == []
