"""Canaries through a registry: `mint --repo URL canary start|stop|status` against a real
`mint registry serve` (roles, protected channels, the token's name in history), and a real
`mint --repo URL serve macaron@production` that splits its traffic by the channel's canary
as it starts and stops on the registry."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from mint import api
from mint.cli import run_in_process
from mint.errors import CanaryOpen, Forbidden, NoCanary, RevisionNotFound
from mint.remote.repo import RemoteRepo
from mint.runtime.service import FALLBACK_POLL
from mint.runtime.split import SCALE, bucket

from conftest import Result, one_line_error
from support import wait_until
from support.loop import add_traces
from support.registry import create_token, error_of, running_registry
from support.serving import start_follower

REF = "macaron@production"
NUDGED = 0.75 * FALLBACK_POLL  # seconds: generous, yet before the follower's fallback poll


@pytest.fixture
def served(two_sets, repo, tmp_path):
    """two_sets behind a registry, production protected (maintainer); a RemoteRepo per token."""
    roles = {"rita": "reader", "walt": "writer", "mara": "maintainer"}
    tokens = {name: create_token(repo.root, name, role) for name, role in roles.items()}
    tokens["chatty"] = create_token(repo.root, "chatty", "maintainer", ("chat*",))
    code, _, err = run_in_process(["--repo", str(repo.root), "registry", "protect", "production"])
    assert code == 0, err
    with running_registry(repo.root) as registry:
        remotes = {n: RemoteRepo(registry.url, t, cache=tmp_path / n) for n, t in tokens.items()}
        yield registry, tokens, remotes, two_sets
        for remote in remotes.values():
            remote.close()


def test_start_status_stop_through_the_registry(served, repo):
    registry, tokens, remotes, ids = served
    rita, walt, mara = remotes["rita"], remotes["walt"], remotes["mara"]
    assert api.canary_of(rita, REF) is None
    with pytest.raises(Forbidden, match="the token is reader"):
        api.canary_start(rita, REF, ids["set2"], 0.2, by="rita")
    with pytest.raises(Forbidden, match="protected|maintainer role"):  # a protected channel
        api.canary_start(walt, REF, ids["set2"], 0.2, by="walt")
    with pytest.raises(Forbidden, match="outside the token's lines"):
        api.canary_of(remotes["chatty"], REF)
    assert api.canary_of(repo, REF) is None  # nothing was started

    started = api.canary_start(mara, REF, ids["set2"], 0.2, by="someone-else", reason="try")
    assert started == api.canary_of(repo, REF) == api.canary_of(rita, REF)
    assert (started.started_by, started.baseline, started.fraction) == ("mara", ids["set"], 0.2)
    move = api.history(rita, REF)[-1]
    assert (move.action, move.by, move.to, move.reason) == (
        "canary-start",
        "mara",
        ids["set2"],
        "try",
    )
    with pytest.raises(CanaryOpen):
        api.canary_start(mara, REF, ids["set2"], 0.3, by="mara")

    add_traces(repo, ids["set"], "production", [1.0, 0.0, None])
    add_traces(repo, ids["set2"], "canary", [0.5])
    live = api.canary_status(rita, REF)
    assert live == api.canary_status(repo, REF)
    assert (live.production.traces, live.production.scored, live.candidate.mean) == (3, 2, 0.5)

    stopped = api.canary_stop(mara, REF, by="someone-else", reason="enough")
    assert (stopped.stopped_by, stopped.outcome, stopped.reason) == ("mara", "stopped", "enough")
    assert api.canary_of(rita, REF) is None
    assert api.canary_status(rita, REF).canary == stopped  # the latest
    assert [m.by for m in api.history(repo, REF)[-2:]] == ["mara", "mara"]
    with pytest.raises(NoCanary):
        api.canary_stop(mara, REF, by="mara")


def test_refusals_are_one_line_errors_with_their_status(served, repo):
    registry, tokens, remotes, ids = served
    start = {"ref": REF, "candidate": ids["set2"], "fraction": 0.2}
    with registry.client(tokens["rita"]) as rita, registry.client(tokens["mara"]) as mara:
        error_of(rita.post("/api/v1/canary/start", json=start), 403, "Forbidden")
        error_of(rita.get("/api/v1/canary/status", params={"ref": REF}), 404, "NoCanary")
        unknown = {**start, "ref": "nope@production"}
        assert (
            "nope@production"
            in error_of(mara.post("/api/v1/canary/start", json=unknown), 404, "RevisionNotFound")[
                "message"
            ]
        )
        error_of(mara.post("/api/v1/canary/stop", json={"ref": REF}), 404, "NoCanary")
        error_of(
            mara.post("/api/v1/canary/start", json={**start, "by": "x"}), 422, "InvalidRequest"
        )
        error_of(
            mara.post("/api/v1/canary/start", json={**start, "fraction": 1}), 422, "InvalidRequest"
        )
        assert rita.get("/api/v1/canary", params={"ref": REF}).json() is None
    with pytest.raises(RevisionNotFound):  # an adapter commit, not a set of the line
        api.canary_start(remotes["mara"], REF, ids["chat2"], 0.1, by="mara")
    assert api.history(repo, REF)[-1].action == "promote"  # nothing was started


def test_the_canary_cli_on_a_registry(served, repo, monkeypatch):
    registry, tokens, remotes, ids = served
    monkeypatch.setenv("XDG_CACHE_HOME", str(repo.root.parent / "cache"))

    def mint(token: str, *args: str) -> Result:
        monkeypatch.setenv("MINT_TOKEN", tokens[token])
        return Result(*run_in_process(["--repo", registry.url, "canary", *args]))

    one_line_error(mint("rita", "start", REF, ids["set2"], "--fraction", "0.2"), "rita may not")
    r = mint("mara", "start", REF, ids["set2"], "--fraction", "0.2")
    assert r.code == 0 and "canary #" in r.out and "(open)" in r.out, r
    r = mint("rita", "status", REF, "--json")
    assert r.code == 0 and r.json()["candidate"]["commit"] == ids["set2"], r
    r = mint("mara", "stop", REF, "--reason", "enough")
    assert r.code == 0 and "(stopped" in r.out, r
    assert api.canary_of(repo, REF) is None and api.history(repo, REF)[-1].by == "mara"
    one_line_error(mint("mara", "stop", REF), "no open canary")
    one_line_error(mint("rita", "status", "nope@x"), "no canary")


# --- a production server following the registry --------------------------------------------


def ask(client: httpx.Client, user: str) -> str:
    """The set commit that answered USER's chat request."""
    body = {
        "model": "macaron",
        "messages": [{"role": "user", "content": "please fix the python bug"}],
        "max_tokens": 1,
        "user": user,
    }
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()["mint"]["set"]


def served_by(url: str, users: list[str]) -> list[str]:
    with httpx.Client(base_url=url, timeout=120) as client, ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda u: ask(client, u), users))


@pytest.mark.xdist_group("demo")
def test_a_following_server_splits_by_the_registry_canary(macaron, tmp_path):
    repo, registry, token, sets, files = macaron
    api.promote(repo, sets[0], "production", by="tester")
    writer = RemoteRepo(registry.url, create_token(repo.root, "walt", "writer"))
    follower = start_follower(registry.url, token, REF, files.base, tmp_path / "serve")
    try:
        assert follower.health()["canary"] is None
        canary = api.canary_start(writer, REF, sets[1], 0.5, by="walt")
        # Within NUDGED: the canary.started event woke the follower, not its minute's poll.
        wait_until(lambda: follower.health()["canary"] == sets[1], "no canary loaded", NUDGED)
        assert follower.health()["commit"] == sets[0]
        users = [f"user-{i}" for i in range(32)]  # all on one side: odds of 2 in 2^32
        again = users[:10]
        sets_served = served_by(follower.url, users + again)
        assert set(sets_served) == {sets[0], sets[1]}, Counter(sets_served)
        first = dict(zip(users, sets_served))
        assert sets_served[len(users) :] == [first[u] for u in again]  # sticky per user
        assert all((first[u] == sets[1]) == (bucket(u, canary.id) < SCALE // 2) for u in users)

        api.canary_stop(writer, REF, by="walt")
        wait_until(lambda: follower.health()["canary"] is None, "the split never ended", NUDGED)
        were_canary = [u for u in users if first[u] == sets[1]]
        assert set(served_by(follower.url, were_canary)) == {sets[0]}
    finally:
        follower.stop()
        writer.close()
