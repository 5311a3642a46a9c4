"""`--wait`: watch the fleet following a channel until every live instance serves a version
(`promote`, `rollback`: the new holder; `canary start`: the candidate, at its share), written
once over the backend: it reads `fleet` from the repository or registry a few times a second.

Stale and stopped instances are left out, and named; an instance that goes stale while one
waits (killed, say) stops counting from then on. At the deadline, NotConverged names each live
instance that does not serve the version, what it serves, and its last failure.
"""

from __future__ import annotations

import time

from mint.backend import backend_of
from mint.errors import NotConverged
from mint.ids import CommitId
from mint.objects import ChannelFleet, Convergence, FleetMember

POLL = 0.1  # seconds between looks at the fleet
TIMEOUT = 300.0


def fleet_wait(
    repo,
    ref: str,
    target: str,
    *,
    canary: bool = False,
    fraction: float | None = None,
    timeout: float = TIMEOUT,
    poll: float = POLL,
) -> Convergence:
    """Wait until every live instance following REF (LINE@CHANNEL) serves TARGET (with CANARY,
    as a canary's candidate at FRACTION); at most TIMEOUT seconds, else NotConverged."""
    b, started = backend_of(repo), time.monotonic()
    deadline = started + timeout
    while True:
        view = _view(b.fleet(ref), ref)
        live = [m for m in view.members if m.live]
        lagging = [m for m in live if not _serves(m, target, canary, fraction)]
        now = time.monotonic()
        if not lagging:
            excluded = [f"{m.instance} ({m.state})" for m in view.members if not m.live]
            names = [m.instance for m in live]
            return Convergence(ref, CommitId(target), canary, now - started, names, excluded)
        if now >= deadline:
            raise NotConverged(ref, target, timeout, [_lag(m, canary) for m in lagging])
        time.sleep(min(poll, max(deadline - now, 0.0)))


def _view(found: list[ChannelFleet], ref: str) -> ChannelFleet:
    line, _, name = ref.partition("@")
    for view in found:
        if view.line == line and view.ref == name:
            return view
    return ChannelFleet(ref, line, name, None, None, None, None, [])


def _serves(m: FleetMember, target: str, canary: bool, fraction: float | None) -> bool:
    if not canary:
        return m.commit == target
    return m.canary == target and (fraction is None or _same(m.fraction, fraction))


def _same(a: float | None, b: float) -> bool:
    return a is not None and abs(a - b) < 1e-9


def _lag(m: FleetMember, canary: bool) -> str:
    """One instance that does not serve the version: what it serves, and its last failure."""
    served = m.canary if canary else m.commit
    text = f"{m.instance} serves {served[:12] if served else 'nothing'}"
    if m.failure is not None:
        text += f" (failed {m.failure.at[:19]}: {m.failure.kind}: {m.failure.reason})"
    return text
