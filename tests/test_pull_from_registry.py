"""`mint pull hf://LINE@REV` from a mint registry's Hub protocol, which names a line that has
no namespace by its name alone (`chat`, not `team/chat`), as the Hub names `gpt2`: a real
`mint registry serve`, the real CLI, `HF_ENDPOINT` pointed at the registry."""

from __future__ import annotations

import pytest

from mint import api
from mint.cli import run_in_process

from conftest import Result, one_line_error
from support.databases import REVISIONS_ON_POSTGRESQL
from support.loop import build_set
from support.registry import create_token, running_registry

pytestmark = [pytest.mark.xdist_group("registry"), REVISIONS_ON_POSTGRESQL]


@pytest.fixture
def served(repo, models, tmp_path, monkeypatch):
    """The set macaron over router, chat, coding and summary; chat@production on its first
    commit, a second commit on chat; a registry over it, HF_* pointed at it with a reader's
    token. Yields (ids, pull: runs the CLI in a second repository)."""
    ids = build_set(repo, models, tmp_path)
    api.promote(repo, ids["set"], "production", by="alice")
    api.promote(repo, ids["chat"], "production", by="alice")
    ids["chat2"] = api.commit(repo, "chat", models["a1"], "chat two", author="alice").id
    token = create_token(repo.root, "rita", "reader")
    other, _ = api.init(tmp_path / "other")
    api.base_add(other, "tiny-llama", models["base"])
    with running_registry(repo.root) as registry:
        monkeypatch.setenv("HF_ENDPOINT", registry.url)
        monkeypatch.setenv("HF_TOKEN", token)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))

        def pull(*args) -> Result:
            return Result(*run_in_process(["--repo", str(other.root), "pull", *args]))

        yield ids, other, pull
    other.close()


def files_of(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_line_without_a_namespace_pulls_at_a_channel_and_at_main(served, repo, tmp_path):
    ids, other, pull = served
    got = pull("hf://chat@production", "--json")
    assert got.code == 0, got
    assert got.json()["repo_id"] == "chat"
    detail = api.show(other, "chat")
    assert detail.provenance["sha"] == ids["chat"][:40]
    assert (detail.provenance["repo"], detail.provenance["revision"]) == ("chat", "production")
    assert detail.files == api.show(repo, ids["chat"]).files  # the same bytes, the same blobs
    head = pull("hf://chat", "--json")  # main: the line's head
    assert head.code == 0, head
    assert api.show(other, "chat").provenance["sha"] == ids["chat2"][:40]
    assert [c.message for c in api.log(other, "chat")] == ["pull hf://chat@main"] + [
        "pull hf://chat@production"
    ]


def test_a_set_line_without_a_namespace_pulls_as_a_set(served, repo, tmp_path):
    ids, other, pull = served
    got = pull("hf://macaron@production", "--as", "macaron", "--json")
    assert got.code == 0, got
    pulled = api.show(other, "macaron")
    assert pulled.kind == "set" and pulled.provenance["sha"] == ids["set"][:40]
    assert {m.label for m in pulled.members} == {"router", "chat", "coding", "summary"}
    api.checkout(repo, ids["set"], tmp_path / "theirs")
    api.checkout(other, "macaron", tmp_path / "ours")
    theirs, ours = files_of(tmp_path / "theirs"), files_of(tmp_path / "ours")
    assert theirs.keys() == ours.keys()
    assert {k: v for k, v in ours.items() if k != "mol.toml"} == {
        k: v for k, v in theirs.items() if k != "mol.toml"
    }


def test_an_unknown_revision_or_a_malformed_address_is_one_line(served):
    _, other, pull = served
    one_line_error(pull("hf://chat@nope"), "nope")
    one_line_error(pull("hf://a/b/c"), "not a hub address")
    one_line_error(pull("hf://"), "not a hub address")
    assert api.ls(other) == []
