"""A pushed set carries its members' lines and, with --tags, their tags: the registry lists each
member line, made where it is missing and fast-forwarded to the member the set pins, never
rewound. The real CLI pushes from a laptop's repository to a real `mint registry serve` over
the `repo` fixture (SQLite and PostgreSQL)."""

from __future__ import annotations

import shutil

import pytest

from mint import api
from mint.cli import run_in_process

from conftest import Result
from support.loop import build_set
from support.registry import create_token, running_registry

pytestmark = pytest.mark.xdist_group("registry")


class Laptop:
    """A repository with the set macaron over router, chat, coding and summary, and the CLI
    pointed at it with a writer's token for the registry at URL."""

    def __init__(self, repo, url: str, ids: dict):
        self.repo, self.url, self.ids = repo, url, ids

    def mint(self, *args) -> Result:
        return Result(*run_in_process(["--repo", str(self.repo.root), *map(str, args)]))

    def push(self, *args) -> dict:
        done = self.mint("push", self.url, *args, "--json")
        assert done.code == 0, done
        return done.json()


@pytest.fixture
def laptop(repo, models, tmp_path, monkeypatch):
    """REPO is the registry's repository; the laptop's is on SQLite beside it."""
    api.base_add(repo, "tiny-llama", models["base"])
    monkeypatch.setenv("MINT_TOKEN", create_token(repo.root, "wanda", "writer"))
    mine, _ = api.init(tmp_path / "laptop")
    ids = build_set(mine, models, tmp_path)
    api.tag(mine, "v1", "router", by="alice")
    api.tag(mine, "first", "chat", by="alice")
    with running_registry(repo.root) as server:
        yield Laptop(mine, server.url, ids)
    mine.close()


def variant(models, tmp_path, key: str, i: int):
    """A copy of adapter KEY whose README differs: another commit of the same shape."""
    dest = tmp_path / f"{key}-{i}"
    shutil.copytree(models[key], dest)
    (dest / "README.md").write_text(f"variant {i}\n")
    return dest


def heads(repo) -> dict[str, str]:
    return {line.name: line.head for line in api.ls(repo)}


def test_a_pushed_set_brings_its_member_lines_and_with_tags_their_tags(laptop, repo):
    ids = laptop.ids
    pushed = laptop.push("macaron")
    pinned = ("router", "chat", "coding", "summary")
    assert heads(repo) == {"macaron": ids["set"]} | {line: ids[line] for line in pinned}
    members = {p["line"]: p for p in pushed["lines"] if p["member"]}
    assert sorted(members) == ["chat", "coding", "router", "summary"]
    assert all(p["moved"] and p["old"] is None for p in members.values())
    assert api.tag_list(repo) == []  # no tags without --tags
    again = laptop.push("macaron", "--tags")
    assert sorted(again["tags"]) == ["chat@first", "router@v1"]
    assert {(t.line, t.name, t.target) for t in api.tag_list(repo)} == {
        ("router", "v1", ids["router"]),
        ("chat", "first", ids["chat"]),
    }
    assert api.show(repo, "router@v1").id == ids["router"]


def test_a_member_line_fast_forwards_and_never_rewinds(laptop, repo, models, tmp_path):
    ids, mine = laptop.ids, laptop.repo
    chat2 = api.commit(mine, "chat", variant(models, tmp_path, "a2", 2), "chat 2", author="a").id
    laptop.push("chat")
    pushed = laptop.push("macaron")  # pins the first chat: the registry is past it
    assert heads(repo)["chat"] == chat2 and heads(repo)["macaron"] == ids["set"]
    chat = next(p for p in pushed["lines"] if p["line"] == "chat")
    assert chat == {
        "line": "chat",
        "old": chat2,
        "new": ids["chat"],
        "moved": False,
        "member": True,
    }
    assert pushed["notes"] == []
    chat3 = api.commit(mine, "chat", variant(models, tmp_path, "a2", 3), "chat 3", author="a").id
    set2 = api.set_commit(mine, ids["folder"] / "mol.toml", "chat 3", author="a").id
    laptop.push("macaron")
    assert heads(repo)["chat"] == chat3 and heads(repo)["macaron"] == set2


def test_a_member_line_that_went_elsewhere_is_left_alone_with_a_note(
    laptop, repo, models, tmp_path
):
    ids, mine = laptop.ids, laptop.repo
    laptop.push("macaron")
    theirs = api.commit(
        repo, "coding", variant(models, tmp_path, "a3", 1), "theirs", author="b"
    ).id
    ours = api.commit(mine, "coding", variant(models, tmp_path, "a3", 2), "ours", author="a").id
    assert laptop.mint("fetch", laptop.url, "coding").code == 0  # diverged: left alone here
    set2 = api.set_commit(mine, ids["folder"] / "mol.toml", "ours", author="a").id
    pushed = laptop.mint("push", laptop.url, "macaron")
    assert pushed.code == 0, pushed
    assert heads(repo)["coding"] == theirs and heads(repo)["macaron"] == set2
    assert f"coding: left at {theirs[:12]}" in pushed.out
    assert f"member line coding left at {theirs[:12]}" in pushed.out and ours[:12] in pushed.out
    assert api.show(repo, ours).line == "coding"  # the member is there, for the set
