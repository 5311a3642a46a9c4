"""`mint serve` reports what it serves to the repository or registry it follows (issue 38).

The report (see `mint.fleet.report`) names this instance, its engine and the fingerprint of
its base, and for the name it follows (`macaron@production`): the set commit serving now and
since when (the swap that made it active), the canary's candidate and share beside it, and
the last failure to stage a version after that swap, with its one-line reason. The runtime
tells the reporter of every swap, failed staging and change of split (`Metrics.changed`), and
the reporter sends at once, on its own thread (`mint.fleet.reporter`): a turn never waits for
a report, and a report that cannot go is dropped and counted (`/metrics`,
`mint_fleet_reports_total`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from mint import __version__, api
from mint.fleet.report import one_line
from mint.fleet.reporter import Reporter, when
from mint.runtime.runtime import Runtime, SwapRecord


def followed_name(rev: str, line: str) -> str:
    """The name REV is followed by: LINE@REF as given, a line's own name, else LINE@REV (a
    commit id given alone)."""
    return rev if "@" in rev or rev == line else f"{line}@{rev}"


def snapshot(
    runtime: Runtime, name: str, *, instance: str, engine: str, interval: float, started_at: str
) -> Callable[[], dict]:
    """The report RUNTIME's state makes now, each time it is called."""
    canary: dict = {"commit": None, "since": None}  # when the split's candidate came

    def report() -> dict:
        active, records, split = runtime.active, list(runtime.history), runtime.split
        entry: dict = {"name": name, "commit": None, "since": None}
        swapped = _last_swap(records, active.id if active else None)
        if active is not None:
            entry |= {"commit": active.id, "since": when(swapped.at if swapped else None)}
            entry["since"] = entry["since"] or when(time.time())
        if split is not None:
            if canary["commit"] != split.canary.candidate:
                canary.update(commit=split.canary.candidate, since=time.time())
            entry["canary"] = {
                "commit": split.canary.candidate,
                "fraction": split.canary.fraction,
                "since": when(canary["since"]),
            }
        entry["failure"] = _failure(records, swapped)
        base = getattr(runtime.base, "fingerprint", None)
        return {
            "instance": instance,
            "engine": engine,
            "base": base,
            "version": __version__,
            "interval": interval,
            "started_at": started_at,
            "names": [entry],
        }

    return report


def _last_swap(records: list[SwapRecord], commit: str | None) -> SwapRecord | None:
    """The swap that made COMMIT active (the newest successful one to it)."""
    return next((r for r in reversed(records) if r.ok and r.new == commit), None)


def _failure(records: list[SwapRecord], swapped: SwapRecord | None) -> dict | None:
    """The newest failed staging after the swap serving now, as a report carries it."""
    after = swapped.at if swapped is not None else float("-inf")
    failed = next((r for r in reversed(records) if not r.ok and r.at > after), None)
    if failed is None:
        return None
    kind, _, reason = (failed.error or "Error: staging failed").partition(": ")
    return {
        "commit": failed.new,
        "at": when(failed.at),
        "kind": kind if kind.isidentifier() else "Error",
        "reason": one_line(reason or kind)[:500],
    }


def start_reporting(
    runtime: Runtime, repo, rev: str, *, instance: str, engine: str, interval: float, by: str
) -> Reporter:
    """Report RUNTIME's state (following REV) to REPO every INTERVAL seconds and at once on
    each change, as BY on a local repository (a registry records the token's name); the
    reporter's counts go to `/metrics`."""
    name = followed_name(rev, runtime.active.spec.name if runtime.active else rev)
    state = snapshot(
        runtime,
        name,
        instance=instance,
        engine=engine,
        interval=interval,
        started_at=when(time.time()),
    )
    send = lambda report: api.fleet_report(repo, report, by=by)  # noqa: E731
    reporter = Reporter(send, state, interval=interval)
    runtime.metrics.reports = reporter.stats
    runtime.metrics.changed = reporter.changed
    return reporter.start()
