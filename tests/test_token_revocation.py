"""A revoked token stops at once on every replica (issue 35, finding 7).

The registry believes a good token without reading the tokens table (mint.registry.auth's
TokenCache), which let a revoked token keep working for seconds: on another replica, or after
a revoke on the repository itself. Two real `mint registry serve` replicas over one PostgreSQL
database (shared by this module's tests: starting them is the expensive part): a token revoked
on the repository's own CLI, or through replica A, is refused by replica B on the very next
request, and a request with a token still believed reads no table for it.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from mint import api
from mint.cli import run_in_process
from mint.registry.app import create_app

from conftest import Result, one_line_error
from support.pgdb import pg_database
from support.registry import Registry, create_token, error_of, start_registry

pytestmark = pytest.mark.xdist_group("registry")


@dataclass
class Pair:
    repo: object
    a: Registry
    b: Registry
    admin: str  # an admin's token


@pytest.fixture(scope="module")
def pair(tmp_path_factory, models):
    with contextlib.ExitStack() as stack:
        folder = tmp_path_factory.mktemp("revocation")
        repo, _ = api.init(folder / "repo", stack.enter_context(pg_database()))
        stack.callback(repo.close)
        api.base_add(repo, "tiny-llama", models["base"])
        api.commit(repo, "chat", models["a1"], "one", author="ann")
        admin = create_token(repo.root, "ada", "admin")
        a, b = start_registry(repo.root), start_registry(repo.root)
        stack.callback(a.stop)
        stack.callback(b.stop)
        yield Pair(repo, a, b, admin)
        for door in (a, b):
            assert "Traceback" not in door.output(), door.output()[-3000:]


def believed(registry: Registry, token: str) -> None:
    """The token read from the table, then believed from memory (a few requests)."""
    with registry.client(token) as http:
        for _ in range(3):
            assert http.get("/api/v1/whoami").status_code == 200


def test_a_token_revoked_on_the_repository_is_refused_by_every_replica_at_once(pair, monkeypatch):
    rita = create_token(pair.repo.root, "rita", "reader")
    believed(pair.a, rita)
    believed(pair.b, rita)
    argv = [sys.executable, "-m", "mint", "--repo", str(pair.repo.root)]
    done = subprocess.run([*argv, "registry", "token", "revoke", "rita"], capture_output=True)
    assert done.returncode == 0, done.stderr
    with pair.b.client(rita) as http:
        error_of(http.get("/api/v1/whoami"), 401, "Unauthenticated")
    monkeypatch.setenv("MINT_TOKEN", rita)
    r = Result(*run_in_process(["--repo", pair.a.url, "log", "chat"]))
    one_line_error(r, "unknown or revoked")


def test_a_token_revoked_through_one_replica_is_refused_by_the_other_at_once(pair, monkeypatch):
    rob = create_token(pair.repo.root, "rob", "writer")
    believed(pair.b, rob)
    monkeypatch.setenv("MINT_TOKEN", pair.admin)
    r = Result(*run_in_process(["--repo", pair.a.url, "registry", "token", "revoke", "rob"]))
    assert r.code == 0, r
    with pair.b.client(rob) as http:
        error_of(http.get("/api/v1/whoami"), 401, "Unauthenticated")
    monkeypatch.setenv("MINT_TOKEN", rob)
    one_line_error(Result(*run_in_process(["--repo", pair.b.url, "log", "chat"])), "revoked")


def test_a_believed_token_costs_no_read_and_a_revoke_costs_one(repo, tmp_path: Path):
    """No more round trips per request than before: a token still believed reads no table;
    after a revoke (on the repository, another connection) the next request reads the tokens
    table once, and refuses it. SQLite and PostgreSQL."""
    token = create_token(repo.root, "tess", "reader")
    seen: list[str] = []

    def count(conn, cursor, statement, *rest):
        seen.append(statement)

    with TestClient(create_app(repo), headers={"Authorization": f"Bearer {token}"}) as client:
        watch = client.app.state.token_cache.watch
        assert getattr(watch, "wait_live", lambda _: True)(30)
        assert client.get("/api/v1/whoami").status_code == 200  # read from the table
        event.listen(repo.db.engine, "before_cursor_execute", count)
        try:
            assert client.get("/api/v1/whoami").status_code == 200
            assert seen == []  # believed: no statement at all
            other = api.open_repo(repo.root)
            api.token_revoke(other, "tess")
            other.close()
            seen.clear()
            error_of(client.get("/api/v1/whoami"), 401, "Unauthenticated")
            assert len([q for q in seen if "tokens" in q]) == 1
        finally:
            event.remove(repo.db.engine, "before_cursor_execute", count)
