"""A request's token and role are checked on the server's event loop (issue 24): FastAPI runs a
sync dependency in its thread pool, a trip there and back for each, so only the route itself
may be sync. The token cache still refuses a token revoked through this registry on the very
next request, and a token it does not hold is read from the tokens table."""

from __future__ import annotations

import inspect

from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from mint import api
from mint.registry import auth, routes_read
from mint.registry.app import create_app

from support.registry import create_token, error_of


def _dependencies(dependant):
    for sub in dependant.dependencies:
        yield sub
        yield from _dependencies(sub)


def test_reads_check_the_token_and_role_without_the_thread_pool():
    reads = [r for r in routes_read.router.routes if isinstance(r, APIRoute)]
    show = next(r for r in reads if r.path == "/api/v1/commits/{rev:path}")
    assert {getattr(d.call, "__name__", "") for d in _dependencies(show.dependant)} >= {
        "repo_of",
        "identity",
        "requires_reader",
    }
    for route in reads:
        for dep in _dependencies(route.dependant):
            if dep.call.__module__ == auth.__name__:
                assert inspect.iscoroutinefunction(dep.call), (route.path, dep.call)


def test_a_token_revoked_here_is_refused_on_the_next_request(tmp_path):
    repo, _ = api.init(tmp_path / "registry")
    try:
        admin = create_token(repo.root, "boss", "admin")
        reader = create_token(repo.root, "ada", "reader")
        with TestClient(create_app(repo)) as client:
            as_reader = {"Authorization": f"Bearer {reader}"}
            for _ in range(2):  # read from the table, then believed from the cache
                got = client.get("/api/v1/whoami", headers=as_reader)
                assert got.status_code == 200 and got.json()["name"] == "ada"
            error_of(client.get("/api/v1/whoami", headers={"Authorization": "Bearer nope"}), 401)
            error_of(client.get("/api/v1/whoami"), 401)
            gone = client.delete(
                "/api/v1/tokens/ada", headers={"Authorization": f"Bearer {admin}"}
            )
            assert gone.status_code == 200, gone.text
            error_of(client.get("/api/v1/whoami", headers=as_reader), 401, "Unauthenticated")
    finally:
        repo.close()
