"""The channel page's fleet: every instance following the channel (what it serves, since when,
whether that is the holder, its failure), and the served timeline beside the channel's moves.
An instance off the holder for longer than the registry's `--fleet-diverged-after`, and a
stretch of the served history that spent that long on another commit than the holder of the
moment, are marked `diverged`."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from mint import api
from mint.ids import Action, as_utc, utcnow
from mint.objects import FleetMember, Move, ServedInterval
from mint.repo import Repo

SERVED = 60  # stretches of the served timeline shown, newest first
MOVING = (Action.CREATE, Action.PROMOTE, Action.FORCE, Action.ROLLBACK, Action.DELETE)


@dataclass(frozen=True)
class FleetRow:
    member: FleetMember
    state: str  # holder | off | failing | stale | stopped: the row's class
    off_for: float | None  # seconds off the holder (live instances only)
    diverged: bool  # off for longer than the registry allows


@dataclass(frozen=True)
class ServedRow:
    """A stretch of the served timeline, or the gap before one (`stretch` None)."""

    instance: str
    stretch: ServedInterval | None
    start: str
    until: str | None
    off_holder: float  # seconds of it spent on another commit than the holder of the time
    diverged: bool


def _at(text: str | None) -> dt.datetime | None:
    return as_utc(dt.datetime.fromisoformat(text)) if text else None


def fleet_context(repo: Repo, ref: str, after: float) -> dict:
    """What the channel page shows of REF's fleet: `fleet` (None when nothing follows it),
    `fleet_rows`, `served` (newest first) and `diverged_after`."""
    views = api.fleet(repo, ref)
    view = views[0] if views and views[0].members else None
    now = utcnow()
    rows = [_row(m, after, now) for m in view.members] if view else []
    served = _served(repo, ref, after, now) if view or _has_history(repo, ref) else []
    return {"fleet": view, "fleet_rows": rows, "served": served, "diverged_after": after}


def _has_history(repo: Repo, ref: str) -> bool:
    return bool(api.fleet_history(repo, ref))


def _row(m: FleetMember, after: float, now: dt.datetime) -> FleetRow:
    off_for = None
    if m.live and not m.holder and m.off_since:
        off_for = (now - _at(m.off_since)).total_seconds()
    if not m.live:
        state = m.state
    elif m.holder:
        state = "holder"
    else:
        state = "failing" if m.failure is not None else "off"
    return FleetRow(m, state, off_for, off_for is not None and off_for > after)


def _served(repo: Repo, ref: str, after: float, now: dt.datetime) -> list[ServedRow]:
    holders = _holders(api.history(repo, ref))
    out, last = [], {}
    for x in api.fleet_history(repo, ref):
        end = _at(x.until or x.last_seen) or now
        key = (x.instance, x.canary)
        before = last.get(key)
        if before is not None and before.until and before.until < x.start:
            out.append(ServedRow(x.instance, None, before.until, x.start, 0.0, False))
        off = 0.0 if x.canary else _off(holders, x.commit, _at(x.start), end)
        out.append(ServedRow(x.instance, x, x.start, x.until, off, off > after))
        last[key] = x
    out.sort(key=lambda r: r.start, reverse=True)
    return out[:SERVED]


def _holders(moves: list[Move]) -> list[tuple[dt.datetime, str | None]]:
    """(since, holder) of the channel, oldest first, from its moves."""
    return [(_at(m.at), m.to) for m in moves if m.action in MOVING]


def _off(holders: list, commit: str, start: dt.datetime, end: dt.datetime) -> float:
    """Seconds of [START, END) during which the channel's holder was not COMMIT."""
    total = 0.0
    for i, (since, holder) in enumerate(holders):
        until = holders[i + 1][0] if i + 1 < len(holders) else end
        lo, hi = max(since, start), min(until, end)
        if hi > lo and holder != commit:
            total += (hi - lo).total_seconds()
    return total
