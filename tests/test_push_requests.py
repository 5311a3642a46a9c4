"""A push in three requests (issue 20, "fewer round trips"), and the parts that make it so.

1. `POST /blobs/missing` with the pushed lines: the blobs the registry lacks and its heads;
2. `POST /blobs/pack`: every missing blob in one streamed body, each hashed on arrival;
3. `POST /objects` with the head moves (compare-and-swap) and the tags, made in the
   transaction that stores the objects.

Every test runs a real `mint registry serve`. A token is believed by the registry only until
anything revokes one (mint.registry.auth.TokenCache, issue 35).
"""

from __future__ import annotations

import hashlib
import re
import socket
import time
from pathlib import Path

import httpx
import pytest

from mint import api
from mint.errors import RevisionNotFound, Unauthenticated
from mint.exchange import sending
from mint.exchange.wire import PACK_TYPE, pack_header
from mint.registry.auth import TokenCache
from mint.registry.token_watch import watch_for
from mint.remote.repo import RemoteRepo
from mint.remote.transfer_client import push
from mint.team.tokens import token_revoke

from support.registry import create_token, error_of, start_registry

MAX_BLOB = 64 * 1024  # the registry's blob limit (the tiny adapters' files are smaller)


@pytest.fixture
def counted(monkeypatch):
    """Every HTTP request this process sends, as "METHOD /path" with ids as {id}."""
    sent: list[str] = []
    original = httpx.Client.send

    def send(self, request, **kwargs):
        path = re.sub(r"/[0-9a-f]{64}", "/{id}", request.url.path)
        sent.append(f"{request.method} {path}")
        return original(self, request, **kwargs)

    monkeypatch.setattr(httpx.Client, "send", send)
    return sent


@pytest.fixture
def world(db_url, models, tmp_path):
    """A laptop repository with line chat, and a registry (on DB_URL) with a writer, a
    maintainer and a reader token."""
    local, _ = api.init(tmp_path / "local")
    api.base_add(local, "tiny-llama", models["base"])
    registry, _ = api.init(tmp_path / "registry", db_url)
    tokens = {r: create_token(registry.root, r, r) for r in ("writer", "maintainer", "reader")}
    server = start_registry(registry.root, args=("--max-blob", str(MAX_BLOB)))
    yield local, registry, tokens, server
    server.stop()
    local.close()
    registry.close()


def test_a_push_of_new_commits_and_blobs_takes_three_requests(models, tmp_path, counted):
    local, _ = api.init(tmp_path / "local")
    api.base_add(local, "tiny-llama", models["base"])
    registry, _ = api.init(tmp_path / "registry")
    token = create_token(registry.root, "writer", "writer")
    server = start_registry(registry.root)
    remote = RemoteRepo(server.url, token)
    try:
        first = api.commit(local, "chat", models["a1"], "one", author="x").id
        api.tag(local, "chat@v1", first, by="x")
        counted.clear()
        done = push(local, remote, ["chat"], tags=True)
        assert counted == [
            "POST /api/v1/blobs/missing",
            "POST /api/v1/blobs/pack",
            "POST /api/v1/objects",
        ]
        assert done.blobs >= 2 and done.lines[0].moved and done.tags == ["chat@v1"]
        second = api.commit(local, "chat", models["a2"], "two", author="x").id
        counted.clear()
        done = push(local, remote, ["chat"])
        assert len(counted) == 3 and done.commits == 1 and done.lines[0].moved
        counted.clear()
        again = push(local, remote, ["chat"], tags=True)  # nothing new: no pack
        assert counted == ["POST /api/v1/blobs/missing", "POST /api/v1/objects"]
        assert again.blobs == 0 and not again.lines[0].moved and again.tags == []
        assert api.resolve(registry, "chat") == second
        assert api.resolve(registry, "chat@v1") == first
        assert api.fsck(registry).ok
    finally:
        remote.close()
        server.stop()
        local.close()
        registry.close()


def test_a_registry_further_behind_than_the_recent_history_gets_every_blob(
    models, tmp_path, counted, monkeypatch
):
    from mint.remote import transfer_client

    monkeypatch.setattr(transfer_client, "RECENT", 1)  # ask about the tip's blobs only
    local, _ = api.init(tmp_path / "local")
    api.base_add(local, "tiny-llama", models["base"])
    ids = [api.commit(local, "chat", models[a], a, author="x").id for a in ("a1", "a2", "a3")]
    registry, _ = api.init(tmp_path / "registry")
    server = start_registry(registry.root)
    remote = RemoteRepo(server.url, create_token(registry.root, "writer", "writer"))
    try:
        counted.clear()
        done = push(local, remote, ["chat"])
        assert counted == [
            "POST /api/v1/blobs/missing",  # the tip's blobs, and the heads
            "POST /api/v1/blobs/missing",  # the rest, once the heads showed how far behind
            "POST /api/v1/blobs/pack",
            "POST /api/v1/objects",
        ]
        assert done.commits == 3 and api.resolve(registry, "chat") == ids[-1]
        assert api.fsck(registry).ok
    finally:
        remote.close()
        server.stop()
        local.close()
        registry.close()


def _pack(client, blobs: list[tuple[str, int]], body: bytes, **headers) -> httpx.Response:
    content = pack_header(blobs) + body
    return client.post(
        "/api/v1/blobs/pack", content=content, headers={"Content-Type": PACK_TYPE, **headers}
    )


def _leftovers(registry) -> list[Path]:
    """Upload temp files left behind (none may be)."""
    folders = {Path(getattr(registry.store, "tmp", None) or ""), registry.mint_dir / "tmp"}
    return [p for f in folders if f.is_dir() for p in f.glob("upload-*")]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_bad_pack_is_refused_with_4xx_and_stores_nothing_of_a_bad_blob(world):
    _, registry, tokens, server = world
    one, two = b"first blob " * 20, b"second blob " * 30
    id1, id2 = hashlib.sha256(one).hexdigest(), hashlib.sha256(two).hexdigest()
    other = hashlib.sha256(b"something else").hexdigest()
    with server.client(tokens["writer"]) as c:
        refusals = [
            (_pack(c, [(other, len(one))], one), 422),  # the bytes hash to another id
            (_pack(c, [(id1, len(one) + 10)], one), 422),  # a body short of what it announces
            (_pack(c, [(id1, len(one) - 1)], one), 422),  # and one longer
            (_pack(c, [(id1, MAX_BLOB + 1)], b"x" * (MAX_BLOB + 1)), 413),  # over the limit
            (_pack(c, [(id1.upper(), len(one))], one), 422),  # not an id
            (_pack(c, [("../" + id1[3:], len(one))], one), 422),
            (_pack(c, [(id1, "12")], one), 422),  # a size that is no integer
            (_pack(c, [(id1, -1)], one), 422),
            (_pack(c, [(id1, len(one)), (id1, len(one))], one + one), 422),  # twice
            (c.post("/api/v1/blobs/pack", content=b"not json\n" + one), 422),
            (c.post("/api/v1/blobs/pack", content=b'{"blobs": []'), 422),  # no header line
            (c.post("/api/v1/blobs/pack", content=b'{"ids": []}\n'), 422),
            (c.post("/api/v1/blobs/pack", content=iter([pack_header([]), b""])), 411),
        ]
        for response, status in refusals:
            assert response.status_code == status, response.text
            assert "\n" not in response.json()["error"]["message"]
        assert not registry.store.has(id1) and not registry.store.has(other)
        # the second blob is bad: the first, whole and verified, stays; nothing of the second
        response = _pack(c, [(id1, len(one)), (id2, len(two))], one + b"X" + two[1:])
        error_of(response, 422, "InvalidObject")
        assert registry.store.has(id1) and not registry.store.has(id2)
        error_of(_pack(server.client(tokens["reader"]), [(id2, len(two))], two), 403)
        good = _pack(c, [(id1, len(one)), (id2, len(two))], one + two)
        assert good.status_code == 200, good.text
        assert [(b["id"], b["written"]) for b in good.json()["blobs"]] == [
            (id1, False),
            (id2, True),
        ]
        with registry.store.open(id2) as f:
            assert f.read() == two
    assert _leftovers(registry) == []
    assert server.alive()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_pack_cut_off_mid_blob_stores_nothing_of_that_blob(world):
    _, registry, tokens, server = world
    one, two = b"a" * 1000, b"b" * 3000
    id1, id2 = hashlib.sha256(one).hexdigest(), hashlib.sha256(two).hexdigest()
    header = pack_header([(id1, len(one)), (id2, len(two))])
    host, port = server.url.removeprefix("http://").split(":")
    head = (
        f"POST /api/v1/blobs/pack HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {tokens['writer']}\r\nContent-Type: {PACK_TYPE}\r\n"
        f"Content-Length: {len(header) + len(one) + len(two)}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(head + header + one + two[:1500])
        deadline = time.monotonic() + 10
        while not registry.store.has(id1) and time.monotonic() < deadline:
            time.sleep(0.05)
        s.shutdown(socket.SHUT_WR)  # the client goes away mid-blob
        try:
            s.recv(65536)
        except OSError:
            pass
    time.sleep(0.5)
    assert registry.store.has(id1) and not registry.store.has(id2)
    assert _leftovers(registry) == []
    with server.client(tokens["reader"]) as c:
        assert c.get("/api/v1/whoami").status_code == 200


def test_heads_and_tags_move_with_the_objects_in_one_transaction(world, models):
    local, registry, tokens, server = world
    a = api.commit(local, "chat", models["a1"], "a", author="x").id
    b = api.commit(local, "chat", models["a2"], "b", author="x").id
    with local.db.read() as conn:
        payload = sending.export_objects(conn, sending.reachable(conn, [b], []))
        sizes = sending.blob_sizes(conn, [a, b])
    for blob_id in sizes:  # the blobs first, as a push sends them (the PUT still works)
        with server.client(tokens["writer"]) as c, local.store.open(blob_id) as f:
            assert c.put(f"/api/v1/blobs/{blob_id}", content=f.read()).status_code in (200, 201)

    def post(who: str, heads: list, tags: list = ()) -> httpx.Response:
        with server.client(tokens[who]) as c:
            body = {**payload, "heads": heads, "tags": list(tags)}
            return c.post("/api/v1/objects", json=body)

    move = {"line": "chat", "old": None, "new": a}
    error_of(post("writer", [{**move, "force": True}]), 403, "Forbidden")  # force: maintainers'
    assert api.ls(registry) == [] and registry.store.has(next(iter(sizes)))
    with pytest.raises(RevisionNotFound):
        api.show(registry, a)  # the refused request stored no object
    done = post("writer", [move], [{"tag": "chat@v1", "rev": a, "message": None}]).json()
    assert sorted(done["stored"]) == sorted([a, b])
    assert done["heads"] == [{**move, "head": a, "result": "moved"}]
    assert [(t["tag"], t["result"]) for t in done["tags"]] == [("chat@v1", "created")]
    stale = post("writer", [{"line": "chat", "old": None, "new": b}]).json()  # not at old
    assert stale["heads"][0]["result"] == "conflict" and stale["heads"][0]["head"] == a
    assert stale["present"] and not stale["stored"]
    kept = post("writer", [], [{"tag": "chat@v1", "rev": b, "message": None}]).json()
    assert kept["tags"][0]["result"] == "elsewhere" and kept["tags"][0]["there"] == a
    same = post("writer", [], [{"tag": "chat@v1", "rev": a, "message": None}]).json()
    assert same["tags"][0]["result"] == "present"
    moved = post("writer", [{"line": "chat", "old": a, "new": b}]).json()
    assert moved["heads"][0]["result"] == "moved" and api.resolve(registry, "chat") == b
    back = post("writer", [{"line": "chat", "old": b, "new": a}]).json()
    assert back["heads"][0]["result"] == "not-fast-forward"
    forced = post("maintainer", [{"line": "chat", "old": b, "new": a, "force": True}]).json()
    assert forced["heads"][0]["result"] == "moved" and api.resolve(registry, "chat") == a
    assert api.resolve(registry, "chat@v1") == a


def test_the_token_cache_believes_a_good_token_until_a_write_or_its_ttl(tmp_path):
    """Over SQLite the cache's watch is the database file's data_version: a revoke (any
    write) by another connection makes the next request read the token again (issue 35); a
    token nothing touched is believed for the ttl, then read again."""
    repo, _ = api.init(tmp_path / "registry")
    secrets = [create_token(repo.root, f"t{i}", "reader") for i in range(3)]
    cache = TokenCache(watch_for(repo), ttl=0.5, size=2)
    assert cache.identity(repo, secrets[0]).name == "t0"
    assert cache.fresh(secrets[0]).name == "t0"  # believed: nothing was written since
    other = api.open_repo(repo.root)  # the repository's own CLI: another connection
    token_revoke(other, "t0")
    other.close()
    assert cache.fresh(secrets[0]) is None
    with pytest.raises(Unauthenticated):
        cache.identity(repo, secrets[0])
    with pytest.raises(Unauthenticated):
        cache.identity(repo, "no such token")
    with pytest.raises(Unauthenticated):
        cache.identity(repo, None)
    for s in secrets[1:] * 2:
        cache.identity(repo, s)
    assert len(cache) == 2  # the least recently used go first
    assert cache.fresh(secrets[1]) is not None
    time.sleep(0.6)
    assert cache.fresh(secrets[1]) is None  # past its ttl: read again
    cache.watch.close()
    repo.close()
