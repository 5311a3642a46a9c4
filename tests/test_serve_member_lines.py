"""Line limits hold through a set served by `mint serve --registry-tokens` (issue 19): a set
hands out its members' adapters (their answers, their commits in /v1/models), so a token
limited to lines may call the server only when the registry lets it read the set's line and
every member's line, as `GET /api/v1/commits/SET` and `/api/v1/lines/SET/objects` decide.
The check holds per version served: when the channel moves to a set with other members, a
caller that could read the old one is checked again.

Through a real `mint registry serve` and a real `mint serve` following it.
"""

from __future__ import annotations

import time

import pytest

from mint import api
from mint.remote.repo import RemoteRepo

from support.loop import build_set
from support.registry import create_token, running_registry
from support.serving import raw_chat, start_serve
from support.texts import MACARON

MEMBERS = ("router", "chat", "coding", "summary")  # macaron's member lines (support.loop)
SWAP_TIMEOUT = 120.0  # seconds the server gets to follow the channel to a new set


@pytest.fixture
def served(repo, models, tmp_path):
    """macaron@production behind a registry, served with --registry-tokens:
    (registry, served, tokens, ids)."""
    ids = build_set(repo, models, tmp_path)
    api.promote(repo, ids["set"], "production", by="alice")
    tokens = {
        "server": create_token(repo.root, "server", "writer"),
        "boss": create_token(repo.root, "boss", "admin"),
        "rita": create_token(repo.root, "rita", "reader"),  # every line
        # the set's line and one member's: the other members' lines are outside
        "coder": create_token(repo.root, "coder", "reader", ("mac*", "coding*")),
        # the set's line and every member's line, named one by one
        "wide": create_token(repo.root, "wide", "reader", ("mac*", *MEMBERS)),
    }
    with running_registry(repo.root) as registry:
        env = {"MINT_TOKEN": tokens["server"]}
        server = start_serve(
            registry.url, models["base"], tmp_path / "serve", "--registry-tokens", env=env
        )
        try:
            yield registry, server, tokens, ids
        finally:
            assert server.stop() == 0, server.output()[-3000:]


def statuses(server, token: str) -> tuple[int, int]:
    """What TOKEN gets from GET /v1/models and from one chat."""
    with server.client(token) as client:
        models = client.get("/v1/models")
        chat = raw_chat(client, "fix the python bug")
    for r in (models, chat):
        if r.status_code == 403:
            error = r.json()["error"]
            assert error["code"] == "permission_denied", r.text
            assert "outside the token's lines" in error["message"], r.text
    return models.status_code, chat.status_code


def test_a_token_must_read_every_member_line_and_again_when_the_channel_moves(
    served, repo, models, tmp_path
):
    """One registry and one server (their start is most of the time): the set as first
    served, then the channel moved to a set with another member."""
    every_member_line_is_read(served)
    a_moved_channel_is_checked_again(served, repo, models, tmp_path)


def every_member_line_is_read(served) -> None:
    registry, server, tokens, ids = served
    # the registry refuses coder the set: its members show lines outside coder's globs
    with registry.client(tokens["coder"]) as coder:
        assert coder.get("/api/v1/lines/macaron/objects").status_code == 403
        assert coder.get(f"/api/v1/commits/{ids['set']}").status_code == 403
    # and so does the server that serves it, on every endpoint but /healthz
    assert statuses(server, tokens["coder"]) == (403, 403)
    assert statuses(server, tokens["rita"]) == (200, 200)
    assert statuses(server, tokens["wide"]) == (200, 200)
    with server.client(tokens["rita"]) as rita:
        listed = rita.get("/v1/models").json()["data"]
        assert {m["id"] for m in listed} >= {"macaron", "chat", "coding"}
    assert tokens["coder"] not in server.output()


def a_moved_channel_is_checked_again(served, repo, models, tmp_path) -> None:
    registry, server, tokens, ids = served
    assert statuses(server, tokens["wide"]) == (200, 200)
    # a new set on the same line whose chat expert is the commit of line secret
    api.commit(repo, "secret", models["a2"], "secret", author="alice")
    folder = ids["folder"]
    (folder / "mol.toml").write_text(MACARON.replace('chat = "chat"', 'chat = "secret"'))
    moved = api.set_commit(repo, folder / "mol.toml", "secret chat", author="alice").id
    boss = RemoteRepo(registry.url, tokens["boss"], cache=tmp_path / "boss")
    try:
        api.promote(boss, moved, "production", by="boss")
    finally:
        boss.close()
    deadline = time.monotonic() + SWAP_TIMEOUT
    while (server.health() or {}).get("commit") != moved:
        assert time.monotonic() < deadline, server.output()[-3000:]
        time.sleep(0.2)
    # wide read the old version; the new one shows line secret, outside its globs
    assert statuses(server, tokens["wide"]) == (403, 403)
    assert statuses(server, tokens["rita"]) == (200, 200)
