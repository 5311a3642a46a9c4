"""`mint serve` says what it does in its log: one line per swap (what it serves, from which
commit to which, in how many ms), per canary start and stop (the candidate, its fraction, why
it stopped), and per reconnect of the followed channel's event stream (which registry and
channel, after how long, which attempt). A real `mint --repo URL serve macaron@production`
follows a real registry, which a test promotes, rolls back, canaries and restarts."""

from __future__ import annotations

import re
import time

import pytest

from mint import api

from support.registry import restart_registry
from support.serving import Served, start_follower

pytestmark = pytest.mark.xdist_group("demo")

ME = "tester"
REV = "macaron@production"
WAIT = 120.0  # seconds: generous on a busy machine; nothing is timed


def wait_for_line(served: Served, pattern: str, after: int = 0) -> re.Match:
    """The first log line past offset AFTER matching PATTERN, once the server wrote it."""
    deadline = time.monotonic() + WAIT
    while True:
        found = re.search(pattern, served.output()[after:], re.MULTILINE)
        if found is not None:
            return found
        assert time.monotonic() < deadline, f"no {pattern!r} in:\n{served.output()[-3000:]}"
        time.sleep(0.1)


def swap_line(old: str | None, new: str) -> str:
    before = old[:12] if old else "nothing"
    return rf"INFO mint\.runtime: swap {REV}: {before} -> {new[:12]} in (\d+) ms"


@pytest.fixture
def follower(macaron, tmp_path):
    repo, registry, token, sets, files = macaron
    api.promote(repo, sets[0], "production", by=ME)
    served = start_follower(registry.url, token, REV, files.base, tmp_path / "f")
    try:
        yield served
    finally:
        served.stop()


def test_swaps_and_canaries_are_logged_with_their_commits(macaron, follower):
    repo, registry, token, sets, files = macaron
    first, second = sets
    wait_for_line(follower, swap_line(None, first))

    mark = len(follower.output())
    api.promote(repo, second, "production", by=ME)
    took = wait_for_line(follower, swap_line(first, second), mark)
    assert int(took.group(1)) >= 0
    mark = len(follower.output())
    api.rollback(repo, REV, by=ME)
    wait_for_line(follower, swap_line(second, first), mark)

    mark = len(follower.output())
    api.canary_start(repo, REV, second, 0.25, by=ME)
    start = rf"canary start {REV}: candidate {second[:12]} at 0.25 beside {first[:12]}$"
    wait_for_line(follower, start, mark)
    mark = len(follower.output())
    api.canary_stop(repo, REV, by=ME, reason="enough")
    stop = rf"canary stop {REV}: candidate {second[:12]} at 0.25: stopped: the channel has no"
    wait_for_line(follower, stop, mark)

    # a canary whose candidate is promoted stops as promoted, and the swap says so too
    api.canary_start(repo, REV, second, 0.5, by=ME)
    wait_for_line(follower, rf"canary start {REV}: candidate {second[:12]} at 0.5 ", mark)
    mark = len(follower.output())
    api.promote(repo, second, "production", by=ME)
    promoted = rf"canary stop {REV}: candidate {second[:12]} at 0.5: promoted: the candidate"
    wait_for_line(follower, promoted, mark)
    wait_for_line(follower, swap_line(first, second), mark)
    assert "Traceback" not in follower.output()


def test_a_reconnect_to_a_restarted_registry_is_logged(macaron, follower):
    repo, registry, token, sets, files = macaron
    wait_for_line(follower, swap_line(None, sets[0]))
    port = int(registry.url.rsplit(":", 1)[1])
    mark = len(follower.output())
    registry.stop()
    time.sleep(1.0)  # down a while: the follower tries, and fails, to reconnect meanwhile
    again = restart_registry(repo.root, port)
    try:
        line = wait_for_line(
            follower,
            rf"INFO mint\.remote\.events: following {REV} on {registry.url}: "
            r"reconnected after (\d+\.\d) s \(attempt (\d+)\)$",
            mark,
        )
        assert float(line.group(1)) > 0 and int(line.group(2)) >= 1
        # still following: a move after the reconnect is served and logged
        mark = len(follower.output())
        api.promote(repo, sets[1], "production", by=ME)
        wait_for_line(follower, swap_line(sets[0], sets[1]), mark)
    finally:
        again.stop()
