"""Remote-tracking refs: after `mint clone` or `mint fetch`, a registry's channels and tags are
kept as read-only `LINE@REMOTE/NAME` (`chat@origin/production`), and `LINE@NAME` falls back to
them when the line has no tag or channel of that name here. A real `mint registry serve`, the
real CLI on both sides; the local repository on SQLite and on PostgreSQL (`db_url`)."""

from __future__ import annotations

import pytest

from mint import api
from mint.cli import run_in_process

from conftest import Result, one_line_error, snapshot
from support.registry import create_token, running_registry

pytestmark = pytest.mark.xdist_group("registry")


class Story:
    """A registry (SQLite) with line chat: c1 (tag v1, channel production), c2 (channel
    staging); a maintainer's token in MINT_TOKEN; `here` runs the CLI in the local clone."""

    def __init__(self, registry_repo, url: str, ids: dict, work):
        self.registry, self.url, self.ids, self.work = registry_repo, url, ids, work

    def here(self, *args) -> Result:
        return Result(*run_in_process(["--repo", str(self.work), *map(str, args)]))

    def there(self, *args) -> Result:
        return Result(*run_in_process(["--repo", str(self.registry.root), *map(str, args)]))

    def resolve(self, rev: str) -> str:
        found = self.here("show", rev, "--json")
        assert found.code == 0, found
        return found.json()["id"]

    def tracked(self) -> set[tuple]:
        repo = api.open_repo(self.work)
        try:
            return {(r.remote, r.name, r.kind, r.target) for r in api.remote_refs(repo)}
        finally:
            repo.close()


@pytest.fixture
def story(db_url, models, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("MINT_USER", "laptop-user")
    registry, _ = api.init(tmp_path / "registry")
    api.base_add(registry, "tiny-llama", models["base"])
    ids = {
        "c1": api.commit(registry, "chat", models["a1"], "one", author="ann").id,
        "c2": api.commit(registry, "chat", models["a2"], "two", author="ann").id,
    }
    api.tag(registry, "v1", ids["c1"], by="ann")
    api.promote(registry, ids["c1"], "production", by="ann")
    api.promote(registry, ids["c2"], "staging", by="ann")
    monkeypatch.setenv("MINT_TOKEN", create_token(registry.root, "max", "maintainer"))
    with running_registry(registry.root) as server:
        work = tmp_path / "work"
        args = ["clone", server.url, work] + (["--db", db_url] if db_url else [])
        cloned = Result(*run_in_process(list(map(str, args))))
        assert cloned.code == 0, cloned
        yield Story(registry, server.url, ids, work)
    registry.close()


def test_a_clone_checks_out_a_registry_channel_by_its_name(story, models, tmp_path):
    s = story
    assert s.resolve("chat@origin/production") == s.ids["c1"]
    assert s.resolve("chat@origin/staging") == s.ids["c2"]
    assert s.resolve("chat@origin/v1") == s.ids["c1"]
    assert s.resolve("chat@production") == s.ids["c1"]  # no local channel: origin's
    assert s.resolve("chat@origin/staging~1") == s.ids["c1"]
    out = tmp_path / "prod"
    assert s.here("checkout", "chat@production", out).code == 0
    assert {f.name: f.read_bytes() for f in out.iterdir()} == {
        f.name: f.read_bytes() for f in models["a1"].iterdir()
    }
    status = s.here("status", "--json").json()
    assert status[0]["channels"] == {}
    assert status[0]["remote"] == {"origin/production": s.ids["c1"], "origin/staging": s.ids["c2"]}
    rows = [line.split() for line in s.here("status").out.splitlines()[2:]]
    assert ["production", "-", s.ids["c1"][:12]] in [r[-3:] for r in rows]  # ON ORIGIN column
    assert s.tracked() == {
        ("origin", "production", "channel", s.ids["c1"]),
        ("origin", "staging", "channel", s.ids["c2"]),
        ("origin", "v1", "tag", s.ids["c1"]),
    }


def test_a_fetch_moves_and_prunes_them_and_local_refs_win(story):
    s = story
    assert s.there("promote", "chat", "--to", "production", "--force", "--reason", "x").code == 0
    assert s.there("channel", "rm", "chat@staging").code == 0
    fetched = s.here("fetch", "origin")
    assert fetched.code == 0, fetched
    assert "pruned chat@origin/staging" in fetched.out
    assert s.resolve("chat@origin/production") == s.ids["c2"]
    one_line_error(s.here("show", "chat@origin/staging"), "chat@origin/staging")
    one_line_error(s.here("show", "chat@staging"), "staging")
    # A local channel of that name wins over origin's.
    moved = s.here("promote", "chat~1", "--to", "production", "--force", "--reason", "mine")
    assert moved.code == 0, moved
    assert s.resolve("chat@production") == s.ids["c1"]
    assert s.resolve("chat@origin/production") == s.ids["c2"]
    status = s.here("status", "--json").json()[0]
    assert status["channels"] == {"production": s.ids["c1"]}
    assert status["remote"] == {"origin/production": s.ids["c2"]}


def test_remote_refs_are_read_only(story):
    s = story
    repo = api.open_repo(s.work)
    before = snapshot(repo)
    for args in (
        ("promote", "chat", "--to", "origin/production"),
        ("rollback", "chat@origin/production"),
        ("channel", "rm", "chat@origin/staging"),
        ("tag", "origin/v2", "chat"),
        ("tag", "chat@origin/v1", "chat", "--force"),
        ("tag", "-d", "chat@origin/v1"),
    ):
        line = one_line_error(s.here(*args), "read-only")
        assert "origin/" in line
    assert snapshot(repo) == before
    repo.close()


def test_a_misspelt_remote_ref_names_the_nearest(story):
    s = story
    line = one_line_error(s.here("show", "chat@origin/prodution"), "did you mean")
    assert "chat@origin/production" in line
    line = one_line_error(s.here("checkout", "chat@prodution", "x"), "did you mean")
    assert "chat@production" in line
    line = one_line_error(s.here("show", "staging"), "did you mean")  # a line? no: a channel
    assert "chat@staging" in line


def test_remotes_that_disagree_are_named_and_a_removed_remote_is_forgotten(story):
    s = story
    assert s.here("remote", "add", "mirror", s.url.replace("127.0.0.1", "localhost")).code == 0
    assert s.here("fetch", "mirror").code == 0
    assert s.resolve("chat@mirror/production") == s.ids["c1"]
    assert s.resolve("chat@production") == s.ids["c1"]  # both agree: no question
    assert s.there("promote", "chat", "--to", "production", "--force", "--reason", "x").code == 0
    assert s.here("fetch", "mirror", "chat").code == 0
    line = one_line_error(s.here("show", "chat@production"), "disagree")
    assert "chat@origin/production" in line and "chat@mirror/production" in line
    assert s.here("remote", "remove", "mirror").code == 0
    assert s.resolve("chat@production") == s.ids["c1"]  # origin's alone again
    one_line_error(s.here("show", "chat@mirror/production"), "mirror/production")
    # A fetch by a URL no remote has keeps nothing (as git's FETCH_HEAD).
    assert s.here("fetch", s.url.replace("127.0.0.1", "localhost")).code == 0
    assert {remote for remote, *_ in s.tracked()} == {"origin"}
