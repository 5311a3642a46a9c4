"""The registry's event stream (`GET /api/v1/events`) and `mint --repo URL serve` following a
channel through it: real `mint registry serve` and `mint serve` processes, on SQLite."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from mint import api
from mint.remote.events import EventStream, parse

from support import wait_until
from support.registry import create_token, restart_registry, running_registry

ME = "tester"


def read_events(url: str, token: str, n: int, headers=None, **params) -> list[dict]:
    """The first N events of the stream (a raw httpx read, as any SSE client would)."""
    import json

    found = []
    headers = {"Authorization": f"Bearer {token}", **(headers or {})}
    with httpx.stream(
        "GET",
        url + "/api/v1/events",
        headers=headers,
        params=params,
        timeout=httpx.Timeout(10, read=5),
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for event_id, kind, data in parse(r.iter_lines()):
            if not data:
                continue
            event = json.loads(data)
            assert (event_id, kind) == (str(event["id"]), event["type"])
            found.append(event)
            if len(found) == n:
                return found
    raise AssertionError(f"the stream ended after {len(found)} events")


@pytest.fixture
def moves(tmp_path, models):
    """A repository with two lines, tags and channel moves, behind a registry."""
    repo, _ = api.init(tmp_path / "repo")
    api.base_add(repo, "tiny-llama", models["base"])
    c1 = api.commit(repo, "chat", models["a1"], "1", author=ME).id
    c2 = api.commit(repo, "chat", models["a2"], "2", author=ME).id
    other = api.commit(repo, "other", models["a1"], "o", author=ME).id
    api.tag(repo, "v1", "chat", by=ME)
    api.promote(repo, c1, "canary", by=ME)
    api.promote(repo, c2, "canary", by=ME)
    api.tag(repo, "v1", "other", by=ME)
    api.rollback(repo, "chat@canary", by=ME)
    api.tag_delete(repo, "chat@v1", by=ME)
    tokens = {
        "all": create_token(repo.root, "rita", "reader"),
        "chat": create_token(repo.root, "carl", "reader", ("chat*",)),
    }
    with running_registry(repo.root) as registry:
        yield repo, registry, tokens, (c1, c2, other)
    repo.close()


def test_the_stream_sends_moves_in_order_and_resumes(moves):
    repo, registry, tokens, (c1, c2, other) = moves
    events = read_events(registry.url, tokens["all"], 6, after=0)
    ids = [e["id"] for e in events]
    assert ids == sorted(ids) and len(set(ids)) == 6
    summary = [
        (e["type"], e["data"]["line"], e["data"]["name"], e["data"]["action"]) for e in events
    ]
    assert summary == [
        ("tag.moved", "chat", "v1", "create"),
        ("channel.moved", "chat", "canary", "promote"),
        ("channel.moved", "chat", "canary", "promote"),
        ("tag.moved", "other", "v1", "create"),
        ("channel.moved", "chat", "canary", "rollback"),
        ("tag.moved", "chat", "v1", "delete"),
    ]
    rollback = events[-2]["data"]
    assert (rollback["from"], rollback["to"], rollback["by"]) == (c2, c1, ME)
    assert events[-1]["data"]["to"] is None and events[0]["at"]
    # Resuming: everything after the id given, once, then new moves as they happen.
    later = read_events(registry.url, tokens["all"], 4, headers={"Last-Event-ID": str(ids[1])})
    assert later == events[2:]
    got: list[dict] = []
    stream = EventStream(registry.url, tokens["all"], last_id=ids[-1])
    reader = threading.Thread(target=stream.follow, args=(got.append,), daemon=True)
    reader.start()
    api.promote(repo, c2, "canary", by=ME)
    wait_until(lambda: got, "the new promote never came")
    stream.close()
    assert [e["data"]["action"] for e in got] == ["promote"] and got[0]["id"] > ids[-1]


def test_a_line_limited_token_sees_only_its_lines(moves):
    _, registry, tokens, _ = moves
    events = read_events(registry.url, tokens["chat"], 5, after=0)
    assert {e["data"]["line"] for e in events} == {"chat"}
    refused = httpx.get(registry.url + "/api/v1/events")
    assert refused.status_code == 401


def test_the_client_reconnects_with_last_event_id(moves, tmp_path):
    repo, registry, tokens, (c1, c2, _) = moves
    port = int(registry.url.rsplit(":", 1)[1])
    got: list[dict] = []
    stream = EventStream(registry.url, tokens["all"], tail=True)
    threading.Thread(target=stream.follow, args=(got.append,), daemon=True).start()
    wait_until(lambda: stream.connects == 1, "never connected")
    registry.stop()
    api.promote(repo, c2, "canary", by=ME)  # while the registry is down
    again = restart_registry(repo.root, port)
    try:
        api.rollback(repo, "chat@canary", by=ME)
        wait_until(lambda: len(got) == 2, f"events lost: {got}")
        assert [e["data"]["action"] for e in got] == ["promote", "rollback"]
        assert stream.connects >= 2
    finally:
        stream.close()
        again.stop()


def test_a_registry_with_followers_stops_when_told(moves):
    """SIGTERM ends the event streams, and the registry exits by itself once the requests in
    flight are answered. It used to wait for every follower to hang up, which a follower
    never does: a replica with followers stopped only when killed."""
    import signal

    repo, registry, tokens, _ = moves
    stream = EventStream(registry.url, tokens["all"], tail=True)
    threading.Thread(target=stream.follow, args=(lambda event: None,), daemon=True).start()
    try:
        wait_until(lambda: stream.connects == 1, "never connected")
        registry.stop(timeout=120)  # SIGTERM, then SIGKILL after 120 s
        assert registry.returncode() in (0, -signal.SIGTERM), registry.output()[-2000:]
        assert "Finished server process" in registry.output()
    finally:
        stream.close()


def test_a_runtime_on_a_registry_follows_the_channel_through_events(macaron, tmp_path):
    from mint.remote.repo import RemoteRepo
    from mint.runtime.server import ServerThread
    from mint.runtime.service import open_runtime

    repo, registry, token, sets, files = macaron
    remote = RemoteRepo(registry.url, token, cache=tmp_path / "cache")
    runtime = open_runtime(remote, "macaron@canary", str(files.base), poll_interval=0.05)
    assert runtime.watch is not None and runtime.poll_interval >= 60
    runtime.follow()
    stop, failures = threading.Event(), []

    def load(url):
        body = {"model": "macaron", "messages": [{"role": "user", "content": "fix the bug"}]}
        with httpx.Client(base_url=url, timeout=60) as client:
            while not stop.is_set():
                if client.post("/v1/chat/completions", json=body).status_code != 200:
                    failures.append(1)

    port = int(registry.url.rsplit(":", 1)[1])
    try:
        with ServerThread(runtime) as url:
            clients = [threading.Thread(target=load, args=(url,)) for _ in range(2)]
            for c in clients:
                c.start()
            for move in (
                lambda: api.promote(repo, sets[1], "canary", by=ME),
                lambda: api.rollback(repo, "macaron@canary", by=ME),
            ):
                move()
                target = api.resolve(repo, "macaron@canary")
                # events, not the poll: the poll comes once a minute (a liveness bound, on a
                # busy machine the swap itself can take seconds)
                wait_until(lambda t=target: runtime.active.id == t, "no switch in 30 s", 30.0)
            registry.stop()  # the registry goes away: the server keeps serving
            time.sleep(0.5)
            api.promote(repo, sets[1], "canary", by=ME)
            again = restart_registry(repo.root, port)
            try:
                wait_until(lambda: runtime.active.id == sets[1], "no switch after restart")
            finally:
                again.stop()
            stop.set()
            for c in clients:
                c.join()
    finally:
        stop.set()
        runtime.close()
        remote.close()
    assert failures == []


def test_one_tail_wakes_every_stream_and_stops_with_the_last(repo, models):
    """Streams wait on the replica's one `Tail` instead of each polling the table: a move
    wakes every waiting stream, and the tail's task ends once no stream is open."""
    import asyncio

    from mint.registry.routes_events import Tail

    api.base_add(repo, "tiny-llama", models["base"])
    c1 = api.commit(repo, "chat", models["a1"], "1", author=ME).id

    async def scenario() -> None:
        tail = Tail(repo, threading.Event())
        async with tail.opened(), tail.opened():
            task, start = tail._task, tail.newest
            assert task is not None and not task.done()
            waiters = [asyncio.create_task(tail.wait(start, 30)) for _ in range(3)]
            await asyncio.sleep(0.2)
            assert not any(w.done() for w in waiters)  # nothing moved yet
            await asyncio.to_thread(api.promote, repo, c1, "production", by=ME)
            await asyncio.wait_for(asyncio.gather(*waiters), 10)
            assert tail.newest > start and tail._task is task  # one task for both streams
        await asyncio.wait_for(task, 5)  # no stream open: the task ends
        async with tail.opened():
            assert tail._task is not task and not tail._task.done()  # a new stream: again

    asyncio.run(scenario())
