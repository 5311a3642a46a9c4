"""Production servers follow a registry: two real `mint --repo URL serve macaron@production`
processes (the installed CLI, a reader token in MINT_TOKEN) switch to the set a promote or a
rollback on the registry names, while clients keep sending chat requests to both, and no
request fails. Times are measured and printed, never asserted (bench/bench_follow.py reports
them)."""

from __future__ import annotations

import time

import pytest

from mint import api

from support.serving import Load, Served, start_follower

pytestmark = pytest.mark.xdist_group("demo")

ME = "tester"
SWITCH_TIMEOUT = 60.0  # seconds: generous; the target (1 s) is measured by the bench


def switch(move, target: str, followers: list[Served], load: Load) -> list[float]:
    """Make MOVE (a promote or rollback returning when done); wait until every follower
    reports TARGET and has answered a request from it. Returns the seconds from MOVE's return
    to each follower's first answer from TARGET."""
    move()
    moved = time.monotonic()
    deadline = moved + SWITCH_TIMEOUT
    for f in followers:
        while (f.health() or {}).get("commit") != target or load.first_answer(
            f.url, target, moved
        ) is None:
            assert time.monotonic() < deadline, f"{f.url} still serves {f.health()}"
            time.sleep(0.02)
    return [load.first_answer(f.url, target, moved) - moved for f in followers]


def test_two_serving_processes_follow_promote_and_rollback_under_load(macaron, tmp_path):
    repo, registry, token, sets, files = macaron
    api.promote(repo, sets[0], "production", by=ME)
    followers: list[Served] = []
    load = None
    try:
        for n in range(2):
            followers.append(
                start_follower(
                    registry.url, token, "macaron@production", files.base, tmp_path / f"f{n}"
                )
            )
        assert [f.health()["commit"] for f in followers] == [sets[0], sets[0]]
        load = Load([f.url for f in followers]).start()
        promoted = switch(
            lambda: api.promote(repo, sets[1], "production", by=ME), sets[1], followers, load
        )
        rolled = switch(
            lambda: api.rollback(repo, "macaron@production", by=ME), sets[0], followers, load
        )
        load.stop()
        print(f"\nfirst answer from the new set: promote {promoted}, rollback {rolled} (s)")
        assert load.failures == []
        for f in followers:
            served = {s for u, _, s in load.answers if u == f.url}
            assert served == {sets[0], sets[1]}, f.url
            assert f.health()["commit"] == sets[0]
    finally:
        if load is not None:
            load.stop()
        for f in followers:
            f.stop()
