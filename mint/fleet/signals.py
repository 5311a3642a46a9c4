"""A channel's fleet diverged from its holder, or converged on it again: events.

A channel's fleet has diverged when one of its live instances has served another commit than
the holder for longer than DIVERGED_AFTER seconds (since the channel moved, or since the
instance began serving what it serves, whichever is later); it has converged when every live
instance serves the holder. Each change is one `ref_history` row of kind `fleet`
(`fleet-diverged`, then `fleet-converged`), so the registry's event stream and its webhooks
send it as `fleet.diverged` / `fleet.converged`, and `mint history` shows it beside the moves.
The registry looks every second (`mint.registry.fleet_watch`); replicas take turns on the
channel's row, so each change is written once.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from mint import schema as s
from mint.fleet.reads import fleet
from mint.ids import Action, RefKind, as_utc, utcnow
from mint.objects import ChannelFleet
from mint.refs import RefsContainer
from mint.repo import Repo

BY = "mint-registry"  # who the events are by
DIVERGED_AFTER = 300.0  # seconds (`mint registry serve --fleet-diverged-after`)


def diverged(view: ChannelFleet, after: float, now: dt.datetime) -> list:
    """The live instances of VIEW off its holder for longer than AFTER seconds."""
    out = []
    for m in view.members:
        if m.live and not m.holder and m.off_since is not None:
            off = (now - as_utc(dt.datetime.fromisoformat(m.off_since))).total_seconds()
            if off > after:
                out.append(m)
    return out


def fleet_signals(repo: Repo, after: float = DIVERGED_AFTER) -> list[int]:
    """Write the events of the channels whose fleet diverged or converged since their last
    one; returns their history ids. Only the channels with a live instance off the holder, or
    whose last event says diverged, are looked at: a converged fleet costs two small reads."""
    now = utcnow()
    with repo.db.read() as conn:
        last = _diverged_last(conn)
        keys = sorted(_off_holder(conn, now) | set(last))
    written = []
    for line, channel in keys:
        views = [v for v in fleet(repo, f"{line}@{channel}") if v.holder is not None]
        if not views:
            continue
        view = views[0]
        off = diverged(view, after, now)
        if off and last.get((line, channel)) != Action.FLEET_DIVERGED:
            written += _log(repo, view, Action.FLEET_DIVERGED, _why_diverged(view, off, after))
        elif view.live == view.serving and last.get((line, channel)) == Action.FLEET_DIVERGED:
            text = f"all {view.live} live instances serve {view.holder[:12]}"
            written += _log(repo, view, Action.FLEET_CONVERGED, text)
    return written


def _off_holder(conn, now) -> set[tuple[str, str]]:
    """The channels followed by a live instance that serves another commit than the holder."""
    f, i, r = s.fleet_follows.c, s.fleet_instances.c, s.refs.c
    q = (
        sa.select(f.line, f.ref)
        .distinct()
        .join(s.fleet_instances, i.name == f.instance)
        .join(s.refs, sa.and_(r.line == f.line, r.name == f.ref, r.kind == RefKind.CHANNEL))
        .where(i.stopped_at.is_(None), i.stale_at >= now)
        .where(sa.or_(f.commit.is_(None), f.commit != r.target))
    )
    return {(line, ref) for line, ref in conn.execute(q)}


def _diverged_last(conn) -> dict:
    """(line, channel) -> FLEET_DIVERGED, for the channels some instance follows whose newest
    fleet event says so (each channel's history read on its (line, name, id) index)."""
    h, f = s.ref_history.c, s.fleet_follows.c
    followed = sa.select(f.line, f.ref).distinct()
    newest = (
        sa.select(sa.func.max(h.id))
        .where(sa.tuple_(h.line, h.name).in_(followed), h.kind == RefKind.FLEET)
        .group_by(h.line, h.name)
    )
    q = sa.select(h.line, h.name, h.action).where(h.id.in_(newest))
    return {
        (line, name): action
        for line, name, action in conn.execute(q)
        if action == Action.FLEET_DIVERGED
    }


def _log(repo: Repo, view: ChannelFleet, action: Action, reason: str) -> list[int]:
    """Append ACTION's row, unless another replica wrote it first (its turn on the channel's
    ref row decides)."""
    h, r = s.ref_history.c, s.refs.c
    with repo.db.write() as conn:
        lock = sa.select(r.target).where(r.line == view.line, r.name == view.ref)
        if conn.dialect.name == "postgresql":
            lock = lock.with_for_update()
        if conn.execute(lock).scalar() != view.holder:
            return []  # it moved meanwhile: the next look judges the new holder
        q = (
            sa.select(h.action)
            .where(h.line == view.line, h.name == view.ref, h.kind == RefKind.FLEET)
            .order_by(h.id.desc())
            .limit(1)
        )
        if conn.execute(q).scalar() == action:
            return []
        off = next((m.commit for m in view.members if m.live and not m.holder), None)
        old = off if action == Action.FLEET_DIVERGED else None
        entry = RefsContainer(conn).log_event(
            view.line, view.ref, RefKind.FLEET, action, old, view.holder, by=BY, reason=reason
        )
    return [entry]


def _why_diverged(view: ChannelFleet, off: list, after: float) -> str:
    """One line: how many live instances are off the holder, and each with what it serves and
    its last failure."""
    each = []
    for m in off[:10]:
        text = f"{m.instance} serves {m.commit[:12] if m.commit else 'nothing'}"
        if m.failure is not None:
            text += f" ({m.failure.kind}: {m.failure.reason})"
        each.append(text)
    more = f"; and {len(off) - 10} more" if len(off) > 10 else ""
    head = f"{len(off)} of {view.live} live instances off {view.holder[:12]} for over {after:g} s"
    return (head + ": " + "; ".join(each) + more)[:2000]
