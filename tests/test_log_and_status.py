"""`mint log` and `mint status` as a team coming from git reads them (issue 36, items 5, 7, 13),
through the real CLI, on SQLite and on PostgreSQL:

- `log` decorates each commit with the names pointing at it (its line's head, tags, channels,
  a remote's as last fetched), shows it as git does (Author and Date lines, the message
  indented, the time in the local zone with its offset), and takes --oneline, --since, --until
  and --author (a part of the name, any case);
- `status` is a table a row per channel, each remote's holder in a column of its own, a page of
  50 lines at a time (`--after`, `--all`), as `gh` lists;
- a channel moved in a clone whose registry holds a channel of that name says that only the
  clone's moved, and how to move the registry's.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

from mint import api
from mint.cli import run_in_process

from conftest import Result
from support.registry import create_token, running_registry


@pytest.fixture
def history(mint, repo, models, monkeypatch):
    """chat: c1 by "Ana Lopez", then c2 by "Bo" a moment later; v1 tags c1, production holds
    c1, staging c2. Returns (c1, c2, a moment between them)."""
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    monkeypatch.setenv("MINT_USER", "Ana Lopez")
    c1 = mint("commit", "chat", models["a1"], "-m", "first\n\nwith a body").out.strip()
    time.sleep(0.01)  # times are kept to the microsecond
    between = dt.datetime.now(dt.UTC)
    time.sleep(0.01)
    monkeypatch.setenv("MINT_USER", "Bo")
    c2 = mint("commit", "chat", models["a2"], "-m", "second").out.strip()
    assert mint("tag", "v1", "chat~1").code == 0
    assert mint("promote", "chat~1", "--to", "production").code == 0
    assert mint("promote", "chat", "--to", "staging").code == 0
    return c1, c2, between


@pytest.fixture
def tokyo(monkeypatch):
    """The local zone is Asia/Tokyo (+0900) for the test's duration."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_log_shows_each_commit_as_git_does_with_its_names(history, mint, tokyo):
    c1, c2, _ = history
    out = mint("log", "chat").out
    blocks = out.split("\n\ncommit ")
    assert blocks[0].splitlines()[:3] == [
        f"commit {c2[:12]} chat (head, staging)",
        "Author: Bo",
        blocks[0].splitlines()[2],
    ]
    assert blocks[1].splitlines()[:2] == [
        f"{c1[:12]} chat (tag: v1, production)",
        "Author: Ana Lopez",
    ]
    for block in blocks:
        date = next(line for line in block.splitlines() if line.startswith("Date:"))
        assert date.endswith(" +0900"), date  # the local zone, said
    assert "\n    first\n    \n    with a body" in out  # the whole message, indented


def test_log_oneline_and_its_json_carry_the_same_names(history, mint, repo):
    c1, c2, _ = history
    lines = mint("log", "chat", "--oneline").out.splitlines()
    assert lines == [
        f"{c2[:12]} chat (head, staging) second",
        f"{c1[:12]} chat (tag: v1, production) first",
    ]
    [newest, oldest] = mint("log", "chat", "--json").json()
    assert [(d["name"], d["kind"]) for d in newest["refs"]] == [
        ("chat", "head"),
        ("chat@staging", "channel"),
    ]
    assert [(d["name"], d["kind"]) for d in oldest["refs"]] == [
        ("chat@v1", "tag"),
        ("chat@production", "channel"),
    ]
    assert [d.name for d in api.log(repo, "chat")[1].refs] == ["chat@v1", "chat@production"]


def test_log_since_until_and_author_narrow_it(history, mint, repo):
    c1, c2, between = history
    ids = lambda *args: [c["id"] for c in mint("log", *args, "--json").json()]  # noqa: E731
    moment = between.isoformat()
    assert ids("chat", "--since", moment) == [c2]
    assert ids("chat", "--until", moment) == [c1]
    assert ids("--since", "1 hour ago") == [c2, c1]
    assert ids("chat", "--since", "2h", "--until", "now") == [c2, c1]
    assert ids("--until", "2000-01-01") == []
    assert ids("chat", "--author", "ana lo") == [c1]  # a part of the name, in any case
    assert ids("chat", "--author", "O") == [c2, c1]  # "Bo" and "Ana Lopez"
    assert ids("chat", "--author", "bo", "-n", "1", "--since", moment) == [c2]
    assert ids("--author", "%") == []  # a LIKE wildcard is a character like any other
    assert [c.id for c in api.log(repo, "chat", since=between, author="ANA")] == []
    assert [c.id for c in api.log(repo, "chat", until=between.isoformat())] == [c1]
    bad = mint("log", "--since", "someday")
    assert bad.code == 2 and "--since" in bad.err and len(bad.err.strip().splitlines()) == 1


# --- status: a page at a time, a row per channel -------------------------------------------


def test_status_prints_a_page_of_50_lines_and_says_how_to_see_more(mint, repo, models):
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    names = sorted(f"line{i:02}" for i in range(55))
    for name in names:
        api.commit(repo, name, models["a1"], name, author="t")
    first = mint("status")
    rows = first.out.splitlines()[2:]
    assert [r.split()[0] for r in rows] == names[:50]
    assert f"--after {names[49]}" in first.err and "--all" in first.err
    rest = mint("status", "--after", names[49])
    assert [r.split()[0] for r in rest.out.splitlines()[2:]] == names[50:] and rest.err == ""
    assert len(mint("status", "--all").out.splitlines()[2:]) == 55
    assert len(mint("status", "--json").json()) == 50
    assert [s["name"] for s in mint("status", "--limit", "3", "--json").json()] == names[:3]
    wrong = mint("status", "--all", "--limit", "3")
    assert wrong.code == 2 and "--all" in wrong.err


def test_status_gives_each_channel_a_row(history, mint):
    c1, c2, _ = history
    assert mint("promote", "chat", "--to", "nightly", "--create").code == 0
    table = mint("status").out.splitlines()
    assert table[0].split() == ["LINE", "KIND", "HEAD", "CHANNEL", "HOLDER"]
    assert [line.split() for line in table[2:]] == [
        ["chat", "adapter", c2[:12], "nightly", c2[:12]],
        ["production", c1[:12]],
        ["staging", c2[:12]],
    ]


# --- through a registry: decorations, status in a clone, a local move said so -------------


@pytest.fixture
def clone(db_url, models, tmp_path, monkeypatch):
    """A registry (SQLite) with chat: c1 (tag v1, production), c2 (staging); a maintainer's
    token in MINT_TOKEN; a clone of it in tmp_path/work on DB_URL's database. Yields
    (registry url, work folder, {c1, c2})."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    registry, _ = api.init(tmp_path / "registry")
    api.base_add(registry, "tiny-llama", models["base"])
    ids = {
        "c1": api.commit(registry, "chat", models["a1"], "one", author="Ann Lee").id,
        "c2": api.commit(registry, "chat", models["a2"], "two", author="Max").id,
    }
    api.tag(registry, "v1", ids["c1"], by="ann")
    api.promote(registry, ids["c1"], "production", by="ann")
    api.promote(registry, ids["c2"], "staging", by="ann")
    monkeypatch.setenv("MINT_TOKEN", create_token(registry.root, "max", "maintainer"))
    registry.close()
    with running_registry(tmp_path / "registry") as server:
        work = tmp_path / "work"
        args = ["clone", server.url, work, "--line", "chat"] + (["--db", db_url] if db_url else [])
        cloned = Result(*run_in_process(list(map(str, args))))
        assert cloned.code == 0 and cloned.err == "", cloned
        # one summary line, then the line and tag cloned (it printed three summaries before)
        first, *details = cloned.out.splitlines()
        assert first.startswith(f"cloned {server.url} into {work}: 4 blobs, "), cloned.out
        assert details and all(d.startswith("  ") for d in details), cloned.out
        yield server.url, work, ids


def here(work, *args) -> Result:
    return Result(*run_in_process(["--repo", str(work), *map(str, args)]))


def test_status_in_a_clone_shows_origins_holders_in_a_column(clone):
    url, work, ids = clone
    c1, c2 = ids["c1"][:12], ids["c2"][:12]
    assert here(work, "promote", "chat", "--to", "production").code == 0
    table = here(work, "status").out.splitlines()
    assert table[0].split() == ["LINE", "KIND", "HEAD", "CHANNEL", "HOLDER", "ON", "ORIGIN"]
    assert [line.split() for line in table[2:]] == [
        ["chat", "adapter", c2, "production", c2, c1],
        ["staging", "-", c2],  # origin's staging; none here
    ]


def test_a_local_move_where_origin_holds_that_channel_says_so(clone):
    url, work, ids = clone
    moved = here(work, "promote", "chat~1", "--to", "staging")
    assert moved.code == 0 and "chat@staging: - -> " in moved.out
    note = moved.err.strip()
    assert note.startswith("note: moved chat@staging in this repository only"), moved
    assert f"origin's chat@staging stays where it was ({ids['c2'][:12]}" in note
    assert f"mint --repo {url} promote chat~1 --to staging" in note
    quiet = here(work, "promote", "chat", "--to", "nightly", "--create")
    assert quiet.code == 0 and quiet.err == ""  # origin has no nightly: nothing to say
    assert here(work, "promote", "chat", "--to", "staging").code == 0
    back = here(work, "rollback", "chat@staging")
    assert back.code == 0 and f"mint --repo {url} rollback chat@staging" in back.err


def test_log_through_a_registry_is_decorated_and_narrowed(clone):
    url, work, ids = clone
    remote = Result(*run_in_process(["--repo", url, "log", "chat", "--oneline"]))
    assert remote.out.splitlines() == [
        f"{ids['c2'][:12]} chat (head, staging) two",
        f"{ids['c1'][:12]} chat (tag: v1, production) one",
    ]
    narrowed = Result(*run_in_process(["--repo", url, "log", "--author", "ann", "--json"]))
    assert [c["id"] for c in narrowed.json()] == [ids["c1"]]
    later = Result(*run_in_process(["--repo", url, "log", "--since", "2999-01-01", "--json"]))
    assert later.json() == []
    # in the clone, origin's refs decorate the commits they point at
    local = here(work, "log", "chat", "--oneline").out.splitlines()
    assert local[0].endswith("chat (head, origin/staging) two"), local
    assert "origin/production" in local[1] and "origin/v1" in local[1], local
