"""A canary through the real server: `mint canary start` on the channel a runtime follows makes
it serve the candidate to its fraction of requests, sticky per `user`, traced as `canary`;
stopping the canary sends everyone back to the holder; promoting the candidate serves it
from the CPU tier."""

from __future__ import annotations

import random
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from mint import api
from mint.examples.demo import MOL
from mint.runtime.split import SCALE, bucket, to_canary

from support import wait_until
from support.runtime import committed_demo
from support.runtime import demo as demo_files

pytestmark = pytest.mark.xdist_group("demo")
REF = "macaron@production"


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """A runtime following macaron@production (SQLite repository) over HTTP, and a second
    set of the line (the degraded router) to canary."""
    from mint.runtime.server import ServerThread
    from mint.runtime.service import open_runtime

    files = demo_files(tmp_path_factory)
    root = tmp_path_factory.mktemp("canary")
    repo, _ = api.init(root / "repo")
    ids = committed_demo(repo, files, root / "set")
    router = api.commit(repo, "router", files.degraded_router, "degraded", author="ann").id
    (root / "set" / "mol.toml").write_text(MOL.format(router=router))
    ids["candidate"] = api.set_commit(repo, root / "set" / "mol.toml", "v2", author="ann").id
    runtime = open_runtime(repo, REF, str(files.base), poll_interval=0.05, max_cpu_adapters=64)
    runtime.follow()
    try:
        with ServerThread(runtime) as url, httpx.Client(base_url=url, timeout=120) as client:
            yield client, runtime, repo, ids
    finally:
        runtime.close()
        repo.close()


def ask(client, user: str | None) -> dict:
    body = {
        "model": "macaron",
        "messages": [{"role": "user", "content": "please fix the python bug"}],
        "max_tokens": 1,
    }
    if user is not None:
        body["user"] = user
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def served_by(client, users: list[str | None]) -> list[str]:
    """The set commit that answered each request, sent 8 at a time."""
    with ThreadPoolExecutor(8) as pool:
        return [body["mint"]["set"] for body in pool.map(lambda u: ask(client, u), users)]


def test_a_canary_at_0_2_serves_a_fifth_sticky_per_user_then_stops(split):
    client, runtime, repo, ids = split
    canary = api.canary_start(repo, REF, ids["candidate"], 0.2, by="ann")
    wait_until(lambda: runtime.canary is not None, "the runtime never loaded the canary")
    assert runtime.canary.id == ids["candidate"] and runtime.active.id == ids["set"]
    users = [f"user-{i}" for i in range(400)] + [f"user-{i}" for i in range(100)]
    sets = served_by(client, users)
    counts = Counter(sets)
    assert set(counts) == {ids["set"], ids["candidate"]}
    share = counts[ids["candidate"]] / len(sets)
    assert 0.15 <= share <= 0.25, counts
    first = dict(zip(users[:400], sets[:400]))
    assert all(first[u] == s for u, s in zip(users[400:], sets[400:]))  # sticky
    expected = {u: bucket(u, canary.id) < 0.2 * SCALE for u in users}
    assert all(expected[u] == (s == ids["candidate"]) for u, s in zip(users, sets))
    runtime.recorder.flush()
    traced = Counter(
        (t.variant, t.set_commit) for t in api.traces_ls(repo, limit=None) if t.user in first
    )
    assert traced == {
        ("canary", ids["candidate"]): counts[ids["candidate"]],
        ("production", ids["set"]): counts[ids["set"]],
    }
    live = api.canary_status(repo, REF)
    assert live.candidate.traces == counts[ids["candidate"]]

    api.canary_stop(repo, REF, by="ann", reason="enough")
    wait_until(lambda: runtime.canary is None, "the runtime kept serving the canary")
    was_canary = [u for u in first if first[u] == ids["candidate"]][:20]
    assert set(served_by(client, was_canary)) == {ids["set"]}


def test_promoting_the_candidate_serves_everyone_from_the_loaded_canary(split):
    client, runtime, repo, ids = split
    api.canary_start(repo, REF, ids["candidate"], 0.5, by="ann")
    wait_until(lambda: runtime.canary is not None, "the runtime never loaded the canary")
    move = api.promote(repo, ids["candidate"], "production", by="ann")
    # the promote of its candidate ends the canary, as promoted, in the move's transaction
    assert move.stopped_canary is not None
    assert api.canary_status(repo, REF).canary.outcome == "promoted"
    wait_until(lambda: runtime.active.id == ids["candidate"], "the holder never moved")
    wait_until(lambda: runtime.canary is None, "the split never ended")
    assert runtime.history[-1].resident  # the canary's version, nothing loaded again
    assert set(served_by(client, [f"p-{i}" for i in range(20)])) == {ids["candidate"]}


def test_requests_without_a_user_are_split_by_a_random_draw():
    draw = random.Random(13).random
    share = sum(to_canary(None, 1, 0.2, draw) for _ in range(20_000)) / 20_000
    assert 0.19 <= share <= 0.21
    sticky = [to_canary("ann", 7, 0.3) for _ in range(50)]
    assert len(set(sticky)) == 1
    assert to_canary("ann", 7, 0.0) is False and to_canary("ann", 7, 1.0) is True
