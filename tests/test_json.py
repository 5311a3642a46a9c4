"""`--json` prints every field of the API's result, under the field's own name."""

from __future__ import annotations

import dataclasses

import pytest

from mint import api

pytestmark = pytest.mark.one_database(
    "sqlite",
    "the subject is how --json prints a result; the results' queries run on both databases in"
    " their own modules",
)


def field_names(obj) -> set[str]:
    names = {f.name.rstrip("_") for f in dataclasses.fields(obj)}
    return names | {n for n in dir(type(obj)) if isinstance(getattr(type(obj), n), property)}


def assert_complete(data, obj, where: str = "") -> None:
    """DATA (parsed JSON) holds every field of OBJ, recursively, with the same values."""
    if dataclasses.is_dataclass(obj):
        assert isinstance(data, dict), where
        assert set(data) == field_names(obj), where
        for name in field_names(obj):
            value = getattr(obj, name if hasattr(obj, name) else name + "_")
            assert_complete(data[name], value, f"{where}.{name}")
    elif isinstance(obj, dict):
        assert set(data) == {str(k) for k in obj}, where
        for k, v in obj.items():
            assert_complete(data[str(k)], v, f"{where}[{k}]")
    elif isinstance(obj, (list, tuple)):
        assert len(data) == len(obj), where
        for i, (d, o) in enumerate(zip(data, obj)):
            assert_complete(d, o, f"{where}[{i}]")
    else:
        assert data == obj, where


@pytest.fixture
def history_repo(repo, mint, models):
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    a = mint("commit", "chat", models["a1"], "-m", "one", "--meta", "lr=2e-4", "--json").json()
    b = mint("commit", "chat", models["a3"], "-m", "two", "--json").json()
    mint("tag", "v1", a["id"])
    mint("promote", a["id"], "--to", "production")
    mint("promote", b["id"], "--to", "production")
    mint("rollback", "chat@production", "--reason", "regressed")
    return mint


@pytest.mark.parametrize(
    "args, call",
    [
        (["show", "chat@v1"], lambda r: api.show(r, "chat@v1")),
        (["show", "chat"], lambda r: api.show(r, "chat")),
        (["log", "chat"], lambda r: api.log(r, "chat")),
        (["log"], lambda r: api.log(r)),
        (["history", "chat@production"], lambda r: api.history(r, "chat@production")),
        (["status"], lambda r: api.status(r)),
        (["ls"], lambda r: api.ls(r)),
        (["ls", "--limit", "1"], lambda r: api.ls(r, limit=1)),
        (["ls", "--after", "chat"], lambda r: api.ls(r, after="chat")),
        (["diff", "chat~1", "chat"], lambda r: api.diff(r, "chat~1", "chat")),
        (["tag", "--list"], lambda r: api.tag_list(r)),
        (["base", "ls"], lambda r: api.base_ls(r)),
        (["fsck"], lambda r: api.fsck(r)),
    ],
)
def test_json_has_every_field(history_repo, repo, args, call):
    out = history_repo(*args, "--json")
    assert out.code == 0, out
    assert_complete(out.json(), call(repo))


def test_show_json_keeps_config_offsets_and_kind(history_repo):
    shown = history_repo("show", "chat@v1", "--json").json()
    assert shown["config"]["peft_type"] == "LORA" and shown["kind"] == "adapter"
    offsets = [t["offset"] for t in shown["tensors"]]
    assert len(set(offsets)) == len(offsets) and min(offsets) > 8
    moves = history_repo("history", "chat@production", "--json").json()
    assert [m["action"] for m in moves] == ["promote", "promote", "rollback"]
    assert all(m["line"] == "chat" and m["channel"] == "production" for m in moves)
    assert moves[-1]["from"] == moves[1]["to"] and moves[-1]["reason"] == "regressed"
