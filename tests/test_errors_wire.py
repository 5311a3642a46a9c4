"""Errors cross the wire whole (issue 20): the registry sends each error's fields as `detail`,
the client builds the same class with the same fields again, and the CLI prints the same line,
hint and exit code for a local error and for the same error from a registry."""

from __future__ import annotations

import inspect
import json

import pytest

from mint import api
from mint import errors as e
from mint.cli import run_in_process
from mint.cli._errors import describe
from mint.jsonable import to_jsonable
from mint.objects import Check, CommitId, GateReport
from mint.registry.failures import error_detail, error_response, status_of
from mint.remote.http import rebuild

from support.registry import create_token, running_registry

pytestmark = pytest.mark.one_database(
    "sqlite",
    "the subject is how an error crosses HTTP; the errors' causes run on both databases in their"
    " modules",
)


SHA = {c: c * 64 for c in "abcdef"}

# A representative value for every constructor field of mint.errors, by the field's name. A
# new error class whose field is not here fails test_every_error_round_trips until it is added.
SAMPLES = {
    "current": "0007",
    "head": SHA["d"],
    "url": "postgresql://db.example/mint",
    "why": "connection refused",
    "missing_database": True,
    "kind": "tag",
    "name": "chat",
    "rev": "abc12",
    "candidates": [SHA["a"], SHA["b"]],
    "ref": "chat@prodution",
    "expected": SHA["a"],
    "found": SHA["b"],
    "target": SHA["c"],
    "near": ["chat@production"],
    "fingerprint": SHA["f"],
    "path": "/data/adapter",
    "filename": "adapter_model.bin",
    "what": "parents",
    "ids": [SHA["a"], SHA["b"], SHA["c"], SHA["d"], SHA["e"], SHA["f"]],
    "line": "chat",
    "new": SHA["e"],
    "version": 3,
    "here": SHA["a"],
    "sent": SHA["b"],
    "canary_id": 7,
    "candidate": SHA["c"],
    "channel": "production",
    "holders": 3,
    "trace_id": "cmpl-42",
    "text": "yesterday",
    "dataset_id": SHA["d"],
    "identity": "token rita (reader)",
    "operation": "mint gc",
    "hook_id": 4,
    "message": "the registry said no",
    "status": 418,
    "ours": SHA["a"],
    "theirs": SHA["b"],
    "known": ["main", "v1"],
    "blob_id": SHA["a"],
    "given": "127.0.0.1:8080",
    "actual": SHA["b"],
    "commit": SHA["e"],
    "limit": 4096,
    "seconds": 15.0,
    "lagging": ["r2 serves aaaaaaaaaaaa (failed 2026-12-03T14:03:09: NotVerified: unsigned)"],
    "lines": ["team-a/*"],
    "scopes": [["team-a/*"], []],
    "number": 2,
    "report": GateReport(
        CommitId(SHA["c"]),
        "chat",
        "production",
        None,
        ["production@v1"],
        [Check("accuracy", ">= 0.9", "0.5", False)],
        [12],
    ),
}


def error_classes() -> list[type]:
    """Every error class of mint.errors (the store's, re-exported there, included)."""
    return sorted(
        (
            obj
            for obj in vars(e).values()
            if inspect.isclass(obj) and issubclass(obj, (e.MintError, e.StoreError))
        ),
        key=lambda cls: cls.__name__,
    )


def sample(cls: type) -> Exception:
    names = e.error_fields(cls)
    if not names:
        return cls(f"something about {cls.__name__} went wrong")
    return cls(**{n: SAMPLES[n] for n in names})


def over_the_wire(exc: Exception) -> Exception:
    """EXC as the registry answers it, rebuilt as the client does."""
    answer = error_response(status_of(exc), type(exc).__name__, str(exc), error_detail(exc))
    body = json.loads(answer.body)["error"]
    return rebuild(body["type"], body["message"], body.get("detail"), answer.status_code)


def data(exc: Exception) -> dict:
    return {k: to_jsonable(v) for k, v in vars(exc).items() if not k.startswith("_")}


@pytest.mark.parametrize("cls", error_classes(), ids=lambda cls: cls.__name__)
def test_every_error_round_trips(cls):
    exc = sample(cls)
    back = over_the_wire(exc)
    assert type(back) is cls
    assert data(back) == data(exc)
    for name in e.error_fields(cls):
        if name != "message":
            assert to_jsonable(getattr(back, name)) == to_jsonable(getattr(exc, name)), name
    assert str(back) == str(exc)
    assert describe(back) == describe(exc)


def test_the_walk_sees_the_classes_that_lost_data_before():
    names = {cls.__name__ for cls in error_classes()}
    assert {"RevisionNotFound", "GateRefused", "BlobMissing", "PushRejected"} <= names
    assert len(names) > 50


def test_fields_the_constructor_refuses_give_a_plain_registry_error():
    back = rebuild("TagExists", "tag moved", {"ref": "chat@v1", "target": 5}, 409)
    assert type(back) is e.RegistryError and back.status == 409 and str(back) == "tag moved"


def test_only_mint_errors_are_built():
    for name in ("Exception", "os", "__builtins__", "InvalidObject.__init__", "Path"):
        back = rebuild(name, "no", {"args": ["x"]}, 418)
        assert type(back) is e.RegistryError and str(back) == "no"


@pytest.mark.parametrize("rev", ["chat@nosuch", "abc12"])
def test_a_remote_cli_error_reads_as_the_local_one(repo, models, monkeypatch, tmp_path, rev):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    api.base_add(repo, "tiny-llama", models["base"])
    api.commit(repo, "chat", models["a1"], "one", author="x")
    local = run_in_process(["--repo", str(repo.root), "show", rev])
    assert local[0] != 0 and "Traceback" not in local[2]
    monkeypatch.setenv("MINT_TOKEN", create_token(repo.root, "rita", "reader"))
    with running_registry(repo.root) as registry:
        remote = run_in_process(["--repo", registry.url, "show", rev])
    assert remote == local
    assert local[2].count("\n") == 1 and rev in local[2]
    if rev == "abc12":
        assert "(hint: a commit prefix needs 7 or more hex digits)" in local[2]
