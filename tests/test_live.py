"""The live numbers the loop decides on (`mint.gates.live`): no caller or user steers a
variant's mean, a decision rests on intervals, and the defaults make the issue's attacks fail
on the numbers alone (the servers' side is tests/test_loop_faults.py)."""

from __future__ import annotations

import pytest

from mint.gates.live import LivePolicy, decide, groups_of, stats_of, under_floor, wilson

DEFAULTS = LivePolicy(min_score=0.3, max_drop=0.05, min_traces=20)


def variant(name: str, scored: list[tuple[float, str | None, str | None]], policy=DEFAULTS):
    """Stats of traces given as (score, caller, user)."""
    rows = [(score, caller, user, f"t{i}") for i, (score, caller, user) in enumerate(scored)]
    return stats_of(name, "ab" * 32, len(rows), groups_of(rows), policy)


def honest(n: int, score: float, apps: int = 4, offset: int = 0):
    return [(score, f"app-{i % apps}", f"user-{offset + i}") for i in range(n)]


def test_a_lone_caller_and_plain_numbers_are_the_plain_mean():
    v = variant("production", [(x / 10, None, f"u{x}") for x in range(11)])
    assert v.mean == pytest.approx(0.5) and v.effective == pytest.approx(11)
    assert (v.users, v.callers, v.unmet) == (11, 1, None)
    assert (v.low, v.high) == pytest.approx(wilson(0.5, 11))


def test_one_user_holds_no_more_than_its_share():
    scored = [(0.0, None, "mallory")] * 40 + [(0.95, None, f"u{i}") for i in range(15)]
    v = variant("production", scored)
    # mallory's 40 weigh as much as a fifth of the whole: 0.8 * 0.95
    assert v.mean == pytest.approx(0.76)
    plain = sum(s for s, _, _ in scored) / len(scored)
    assert plain < 0.3 and not under_floor(v, DEFAULTS)  # the plain mean would roll back


def test_one_caller_holds_no_more_than_its_share_whatever_users_it_invents():
    canary = honest(16, 0.0) + [(1.0, "mallory", f"m{i}") for i in range(16)]
    production = honest(64, 0.95) + [(0.0, "mallory", f"m{i}") for i in range(64)]
    c, p = variant("canary", canary), variant("production", production)
    assert c.mean == pytest.approx(0.25) and p.mean == pytest.approx(0.7125)
    assert c.callers == p.callers == 5
    verdict = decide(p, c, DEFAULTS)
    assert verdict.action == "stop" and verdict.high < -0.05, verdict
    # the same numbers with no caps (every caller trusted): the plain mean, and a promotion
    # once there are enough of them
    trusting = LivePolicy(max_drop=0.05, min_traces=20, max_caller_share=1.0)
    c = variant("canary", canary * 10, trusting)
    p = variant("production", production * 10, trusting)
    assert decide(p, c, trusting).action == "promote"


def test_shares_fewer_groups_cannot_meet_are_not_judged():
    two = honest(30, 0.9, apps=1) + [(0.1, "mallory", f"m{i}") for i in range(30)]
    v = variant("production", two)
    assert v.unmet and "2 callers" in v.unmet
    assert not under_floor(variant("production", [(0.0, None, "u")] * 30), DEFAULTS)
    few = variant("canary", [(1.0, None, f"u{i % 3}") for i in range(30)])
    assert "3 users (needs 5)" in few.unmet
    assert decide(variant("production", honest(30, 0.1)), few, DEFAULTS).action == "wait"


def test_decisions_rest_on_the_interval_of_the_difference():
    prod = variant("production", honest(25, 0.6))
    close = variant("canary", honest(25, 0.7, offset=100))
    assert decide(prod, close, DEFAULTS).action == "wait"  # 0.1 better, not yet sure of it
    better = variant("canary", honest(25, 0.95, offset=100))
    assert decide(prod, better, DEFAULTS).action == "promote"
    worse = variant("canary", honest(25, 0.1, offset=100))
    assert decide(prod, worse, DEFAULTS).action == "stop"
    # undecided at max_traces: stopped, never promoted on a hope
    capped = LivePolicy(max_drop=0.05, min_traces=20, max_traces=25)
    assert decide(prod, close, capped).action == "stop"
    assert decide(variant("production", honest(10, 0.6)), close, DEFAULTS).action == "wait"


def test_the_floor_needs_the_upper_bound_under_it():
    low = variant("production", honest(25, 0.25))
    assert not under_floor(low, DEFAULTS)  # mean under 0.3, its interval not
    lower = variant("production", honest(60, 0.1))
    assert lower.high < 0.3 and under_floor(lower, DEFAULTS)
    assert not under_floor(lower, LivePolicy(min_traces=20))  # no floor set


def test_policy_of_a_live_table():
    p = LivePolicy.of({"min_score": 0.4, "min_traces": 7, "confidence": 0.9}, min_traces=3)
    assert (p.min_score, p.min_traces, p.confidence, p.traces_cap) == (0.4, 3, 0.9, 30)
    assert LivePolicy.of(None) == LivePolicy()
    assert LivePolicy(max_user_share=0.1, min_users=3).users_needed == 10
