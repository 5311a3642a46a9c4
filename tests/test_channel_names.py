"""Names that look like channels (issue 19, items 4, 11 and 12's approve): a tag may not take a
channel's name (one on its line, a protected one, a contract's) through any door that makes
tags; a promote that would create a channel a typo away from a known one asks `did you mean`
unless --create; `mint channel rm` removes an unprotected channel, logged; and of eight
simultaneous approvals by one identity exactly one says it created the row.

Locally through the real CLI (SQLite and PostgreSQL), and against real `mint registry serve`
processes through the CLI (`--repo URL`, push, fetch) and httpx.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from mint import api
from mint import schema as s
from mint.cli import run_in_process

from conftest import Result, one_line_error, snapshot
from support.pgdb import pg_database
from support.registry import create_token, error_of, start_registry
from support.texts import PROD


def write_contract(folder: Path, name: str, channel: str) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(PROD.replace('"prod"', f'"{name}"').replace("production", channel))
    return path


@pytest.fixture
def chat(mint, models, tmp_path):
    """Two commits on line `chat`, a contract on `production`, `release` protected."""
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    ids = [mint("commit", "chat", models[k], "-m", k, "--json").json()["id"] for k in ("a1", "a2")]
    assert mint("contract", "add", write_contract(tmp_path, "prod", "production")).code == 0
    assert mint("registry", "protect", "release").code == 0
    return mint, ids


# --- locally ---------------------------------------------------------------------------------


def test_a_tag_may_not_take_a_channel_name(chat, repo):
    mint, ids = chat
    assert mint("promote", ids[0], "--to", "canary").code == 0
    before = snapshot(repo)
    for name, why in (
        ("production", "contract prod guards channel production"),  # no such channel yet
        ("release", "channel release is protected"),
        ("canary", "chat@canary is a channel"),
        ("chat@production", "contract prod"),
    ):
        line = one_line_error(mint("tag", name, ids[1]), why, code=1)
        assert "may not be a tag" in line and "hint: choose another name" in line
    assert snapshot(repo) == before  # nothing stored
    one_line_error(mint("show", "chat@production"), "no tag or channel")
    # A plain tag is still a tag; and a channel may not take a tag's name.
    assert mint("tag", "v1", ids[0]).code == 0
    one_line_error(mint("promote", ids[0], "--to", "v1"), "chat@v1 is a tag")
    assert api.tag_list(repo, "chat")[0].name == "v1"


def test_a_promote_to_a_typo_is_refused_unless_create(chat, repo):
    mint, ids = chat
    assert mint("promote", ids[0], "--to", "canary").code == 0
    before = snapshot(repo)
    for channel, meant in (
        ("prodution", "production"),  # a contract's channel, not yet on the line
        ("Production", "production"),
        ("relaese", "release"),  # a protected name: two letters swapped
        ("canry", "canary"),  # a channel the line has
    ):
        line = one_line_error(mint("promote", ids[1], "--to", channel), code=1)
        assert f"chat@{channel} is no channel yet; did you mean {meant}?" in line, line
        assert f"hint: pass --create to make the new channel {channel}" in line
    assert snapshot(repo) == before  # nothing created, nothing logged
    # A name far from every known one is created as before; --create makes a near one.
    assert mint("promote", ids[1], "--to", "nightly").code == 0
    made = mint("promote", ids[1], "--to", "prodution", "--create", "--json")
    assert made.code == 0 and made.json()["action"] == "promote"
    assert mint("show", "chat@prodution", "--json").json()["id"] == ids[1]
    # Once it exists, moving it again needs no --create.
    assert mint("promote", ids[0], "--to", "prodution").code == 0


def test_channel_rm_removes_an_unguarded_channel_and_logs_it(chat, repo, monkeypatch):
    mint, ids = chat
    monkeypatch.setenv("MINT_USER", "tidy")
    assert mint("promote", ids[0], "--to", "prodution", "--create").code == 0
    assert mint("promote", ids[1], "--to", "prodution").code == 0
    removed = mint("channel", "rm", "chat@prodution", "--json")
    assert removed.code == 0, removed
    assert removed.json()["action"] == "delete" and removed.json()["from"] == ids[1]
    assert removed.json()["to"] is None and removed.json()["by"] == "tidy"
    one_line_error(mint("show", "chat@prodution"), "no tag or channel")
    assert "prodution" not in api.status(repo)[0].channels
    moves = mint("history", "chat@prodution", "--json").json()
    assert [m["action"] for m in moves] == ["promote", "promote", "delete"]
    assert "delete" in mint("history", "chat@prodution").out
    one_line_error(mint("channel", "rm", "chat@prodution"), "unknown channel")
    # A protected channel, and a contract's, are never removed.
    for channel, why in (("release", "is protected"), ("production", "contract prod guards")):
        forced = ("--force", "--reason", "setup")
        assert mint("promote", ids[0], "--to", channel, *forced).code == 0
        before = snapshot(repo)
        line = one_line_error(mint("channel", "rm", f"chat@{channel}"), why, code=1)
        assert "may not be removed" in line
        assert snapshot(repo) == before
    # A removed channel is made again from nothing: nothing to roll back to.
    assert mint("promote", ids[0], "--to", "prodution", "--create").code == 0
    one_line_error(mint("rollback", "chat@prodution"), "nothing to roll back")


# --- against a registry --------------------------------------------------------------------

ROLES = {"wanda": "writer", "max": "maintainer", "ada": "admin"}


def cli(env: dict, who: str, *args) -> Result:
    """The real CLI with WHO's token in the environment."""
    with _token(env["monkeypatch"], env["tokens"][who]):
        return Result(*run_in_process([str(a) for a in args]))


@contextlib.contextmanager
def _token(monkeypatch, token: str):
    with monkeypatch.context() as m:
        m.setenv("MINT_TOKEN", token)
        yield


@pytest.fixture(params=["sqlite", "postgresql"])
def team(request, models, tmp_path, monkeypatch):
    """A registry with line `chat` (two commits), a contract on `production`, `release`
    protected, and a token per person."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    with contextlib.ExitStack() as stack:
        url = None if request.param == "sqlite" else stack.enter_context(pg_database())
        repo, _ = api.init(tmp_path / "registry", url)
        stack.callback(repo.close)
        api.base_add(repo, "tiny-llama", models["base"])
        ids = [api.commit(repo, "chat", models[k], k, author="al").id for k in ("a1", "a2")]
        api.contract_add(repo, write_contract(tmp_path, "prod", "production"), by="ada")
        api.protect(repo, "release", by="ada")
        tokens = {n: create_token(repo.root, n, role) for n, role in ROLES.items()}
        server = start_registry(repo.root)
        stack.callback(server.stop)
        client = stack.enter_context(server.client(tokens["wanda"]))
        yield dict(
            repo=repo,
            url=server.url,
            ids=ids,
            tokens=tokens,
            monkeypatch=monkeypatch,
            tmp=tmp_path,
            client=client,
            server=server,
            db=request.param,
        )


def test_no_door_of_a_registry_makes_a_tag_named_as_a_channel(team, models):
    repo, ids, client = team["repo"], team["ids"], team["client"]
    # The tag route: a contract's channel, a protected one, one the line has.
    assert client.post("/api/v1/promote", json={"rev": ids[0], "channel": "canary"}).is_success
    for name in ("production", "chat@release", "canary"):
        r = client.post("/api/v1/tags", json={"tag": name, "rev": ids[1]})
        assert "may not be a tag" in error_of(r, 409, "ReservedName")["message"]
    gone = client.get("/api/v1/resolve", params={"rev": "chat@production"})
    error_of(gone, 404, "RevisionNotFound")
    # A push carrying a tag `production` (made where no contract names it) is refused there.
    work = team["tmp"] / "work"
    assert cli(team, "wanda", "clone", team["url"], work).code == 0
    local = api.open_repo(work)
    api.base_add(local, "tiny-llama", models["base"])
    api.tag(local, "production", "chat", by="wanda")
    pushed = cli(team, "wanda", "--repo", work, "push", "origin", "chat", "--tags")
    line = one_line_error(pushed)
    assert "chat@production may not be a tag" in line
    assert [t.name for t in api.tag_list(repo, "chat")] == []
    # A fetch never makes here a tag that is a channel's name here.
    assert client.post("/api/v1/tags", json={"tag": "gold", "rev": ids[1]}).is_success
    api.contract_add(local, write_contract(team["tmp"], "au", "gold"), by="wanda")
    fetched = cli(team, "wanda", "--repo", work, "fetch", "origin")
    assert "contract au guards channel gold" in one_line_error(fetched)
    assert [t.name for t in api.tag_list(local, "chat")] == ["production"]
    local.close()


def test_a_typo_promote_and_channel_rm_through_a_registry(team):
    repo, ids, url = team["repo"], team["ids"], team["url"]
    before = snapshot(repo)
    typo = cli(team, "wanda", "--repo", url, "promote", ids[0], "--to", "prodution")
    line = one_line_error(typo, "did you mean production?", code=1)
    assert "--create" in line
    r = team["client"].post("/api/v1/promote", json={"rev": ids[0], "channel": "prodution"})
    assert error_of(r, 422, "ChannelTypo")["detail"]["near"] == ["production"]
    assert snapshot(repo) == before
    made = cli(team, "wanda", "--repo", url, "promote", ids[0], "--to", "prodution", "--create")
    assert made.code == 0, made
    assert api.resolve(repo, "chat@prodution") == ids[0]
    # Removing it is a maintainer's; the registry records the token's name.
    refused = cli(team, "wanda", "--repo", url, "channel", "rm", "chat@prodution")
    one_line_error(refused, "maintainer")
    removed = cli(team, "max", "--repo", url, "channel", "rm", "chat@prodution", "--json")
    assert removed.code == 0, removed
    assert removed.json()["by"] == "max" and removed.json()["action"] == "delete"
    with pytest.raises(Exception, match="no tag or channel"):
        api.resolve(repo, "chat@prodution")
    history = cli(team, "max", "--repo", url, "history", "chat@prodution", "--json").json()
    assert [(m["action"], m["by"]) for m in history] == [("promote", "wanda"), ("delete", "max")]
    # A protected channel is refused, even to an admin.
    forced = ("--force", "--reason", "setup")
    assert cli(team, "ada", "--repo", url, "promote", ids[0], "--to", "release", *forced).code == 0
    admin = httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {team['tokens']['ada']}"}
    )
    with admin:
        r = admin.delete("/api/v1/channels/chat/release")
    assert "is protected" in error_of(r, 409, "ChannelGuarded")["message"]
    assert api.resolve(repo, "chat@release") == ids[0]


@pytest.mark.parametrize("team", ["postgresql"], indirect=True)  # SQLite writes one at a time
def test_eight_simultaneous_approvals_by_one_identity_create_one(team):
    repo, ids = team["repo"], team["ids"]
    body = {"rev": ids[1], "channel": "release"}
    token = team["tokens"]["max"]
    clients = [team["server"].client(token) for _ in range(8)]
    barrier, answers = threading.Barrier(8), [None] * 8

    def approve(i: int) -> None:
        barrier.wait()
        answers[i] = clients[i].post("/api/v1/approvals", json=body)

    threads = [threading.Thread(target=approve, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for c in clients:
        c.close()
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    assert sorted(a.json()["created"] for a in answers) == [False] * 7 + [True]
    assert len({a.json()["at"] for a in answers}) == 1  # every answer shows the stored row
    with repo.db.read() as conn:
        a = s.approvals.c
        rows = conn.execute(sa.select(s.approvals).where(a.commit_id == ids[1])).all()
    assert [(r.by, r.channel) for r in rows] == [("max", "release")]
