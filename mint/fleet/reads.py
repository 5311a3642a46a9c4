"""What the fleet serves and served: every instance following a name beside what the name names
now (`fleet`), the served history and what answered at a moment (`fleet_history`), live
counts per channel for `mint status` (`serving_counts`), and served evidence for a gate's
`[[served]]` rows (`served_minutes`)."""

from __future__ import annotations

import datetime as dt
import functools
from collections import defaultdict
from collections.abc import Iterable

import sqlalchemy as sa

from mint import schema as s
from mint.errors import MintError, RevisionNotFound
from mint.ids import CommitId, RefKind, as_utc, iso, utcnow
from mint.objects import ChannelFleet, FleetFailure, FleetMember, ServedInterval
from mint.refs import resolve
from mint.refs.revisions import find_line
from mint.repo import Repo
from mint.traces.records import parse_since

LIVE, STALE, STOPPED = "live", "stale", "stopped"


def split_name(ref: str) -> tuple[str, str]:
    """(line, ref) of LINE@REF (ref '' for a line's head)."""
    line, _, name = str(ref).partition("@")
    if not line:
        raise RevisionNotFound(str(ref), "expected LINE@CHANNEL")
    return line, name


def state_of(row, now: dt.datetime) -> str:
    """An instance row's state: stopped (it said goodbye), stale (unseen for three of its
    intervals) or live."""
    if row.stopped_at is not None:
        return STOPPED
    return STALE if now > as_utc(row.stale_at) else LIVE


def fleet(repo: Repo, ref: str | None = None) -> list[ChannelFleet]:
    """Every name followed by an instance (only REF, LINE@CHANNEL, when given), each with what
    it names now and every instance following it: what it serves, since when, its canary
    split, its last failure, and whether it is live, stale or stopped."""
    f, i = s.fleet_follows.c, s.fleet_instances.c
    q = sa.select(s.fleet_follows, *_instance_columns()).join(
        s.fleet_instances, i.name == f.instance
    )
    if ref is not None:
        line, name = split_name(ref)
        q = q.where(f.line == line, f.ref == name)
    now = utcnow()
    with repo.db.read() as conn:
        rows = list(conn.execute(q.order_by(f.line, f.ref, f.name, f.instance)))
        keys = sorted({(r.line, r.ref) for r in rows} | ({split_name(ref)} if ref else set()))
        named = _named(conn, keys)
        canaries = _canaries(conn, keys)
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for row in rows:
        groups[(row.line, row.ref)].append(row)
    out = []
    for key in keys:
        holder, moved = named.get(key, (None, None))
        candidate, fraction = canaries.get(key, (None, None))
        members = [_member(r, holder, moved, now) for r in groups.get(key, [])]
        name = f"{key[0]}@{key[1]}" if key[1] else key[0]
        if ref is not None and not members and holder is None:
            raise RevisionNotFound(ref, "no instance follows it, and it names nothing")
        out.append(ChannelFleet(name, *key, holder, iso(moved), candidate, fraction, members))
    return out


def _instance_columns():
    i = s.fleet_instances.c
    return (i.engine, i.base, i.interval, i.seen_at, i.stale_at, i.stopped_at, i.first_seen)


def _member(r, holder: str | None, moved, now: dt.datetime) -> FleetMember:
    failure = None
    if r.failure is not None:
        failure = FleetFailure(r.failed_commit, iso(r.failed_at), r.failure_kind, r.failure)
    on = holder is not None and r.commit == holder
    off = None
    if not on:
        times = [as_utc(t) for t in (moved, r.since or r.first_seen) if t is not None]
        off = iso(max(times)) if times else None
    return FleetMember(
        r.instance,
        r.engine,
        r.base,
        r.name,
        CommitId(r.commit) if r.commit else None,
        iso(r.since),
        CommitId(r.canary) if r.canary else None,
        r.fraction,
        iso(r.canary_since),
        failure,
        iso(r.seen_at),
        state_of(r, now),
        on,
        off,
    )


def _named(conn, keys: Iterable[tuple[str, str]]) -> dict:
    """(line, ref) -> (the commit it names now, when it last moved) for each of KEYS."""
    keys = list(keys)
    out: dict = {}
    if not keys:
        return out
    r = s.refs.c
    refs = sa.select(r.line, r.name, r.target, r.updated_at).where(
        sa.tuple_(r.line, r.name).in_([k for k in keys if k[1]])
    )
    if any(k[1] for k in keys):
        for line, name, target, at in conn.execute(refs):
            out[(line, name)] = (target, at)
    for line, name in keys:
        if (line, name) in out:
            continue
        try:
            out[(line, name)] = (resolve(conn, f"{line}@{name}" if name else line).id, None)
        except MintError:
            out[(line, name)] = (None, None)  # a name that names nothing here (any more)
    return out


def _canaries(conn, keys: list[tuple[str, str]]) -> dict:
    c = s.canaries.c
    wanted = [k for k in keys if k[1]]
    if not wanted:
        return {}
    q = sa.select(c.line, c.channel, c.candidate, c.fraction).where(
        c.stopped_at.is_(None), sa.tuple_(c.line, c.channel).in_(wanted)
    )
    return {(line, ch): (cand, frac) for line, ch, cand, frac in conn.execute(q)}


def fleet_history(repo: Repo, ref: str, *, at: str | None = None) -> list[ServedInterval]:
    """What each instance served for REF (LINE@CHANNEL), oldest first per instance: stretches
    of one commit, with gaps where the instance was unseen. With AT (an ISO time, or an age
    such as 10m), only the stretches that answered at that moment."""
    line, name = split_name(ref)
    v, i = s.fleet_served.c, s.fleet_instances.c
    q = (
        sa.select(s.fleet_served, i.seen_at, i.stale_at, i.stopped_at)
        .join(s.fleet_instances, i.name == v.instance, isouter=True)
        .where(v.line == line, v.ref == name)
    )
    moment = parse_since(at) if at is not None else None
    if moment is not None:
        q = q.where(v.start <= moment, sa.or_(v.until.is_(None), v.until > moment))
    now = utcnow()
    with repo.db.read() as conn:
        rows = list(conn.execute(q.order_by(v.instance, v.canary, v.start, v.id)))
        if not rows and find_line(conn, line) is None:  # a typo, not a line nobody served
            raise RevisionNotFound(ref)
    out = [_interval(r, now) for r in rows]
    if moment is not None:  # an open stretch of an instance unseen since ends where it was seen
        out = [x for x in out if not (x.stale and dt.datetime.fromisoformat(x.last_seen) < moment)]
    return out


def _interval(r, now: dt.datetime) -> ServedInterval:
    open_ = r.until is None
    unseen = open_ and (r.seen_at is None or state_of(r, now) != LIVE)
    return ServedInterval(
        r.id,
        r.instance,
        r.name,
        CommitId(r.commit),
        bool(r.canary),
        r.fraction,
        iso(r.start),
        iso(r.until),
        iso(r.seen_at) if open_ else None,
        unseen,
    )


def serving_counts(conn, lines: list[str]) -> dict[str, dict[str, list[int]]]:
    """line -> channel -> [live instances serving its holder, live instances following it],
    for the channels of LINES (a page of `status`, in name order) that some instance follows.
    One statement, built once: the range of the page's names, on the (line, ref) index."""
    if not lines:
        return {}
    wanted, now = set(lines), utcnow()
    out: dict[str, dict[str, list[int]]] = defaultdict(dict)
    for row in conn.execute(_counts(), {"first": min(lines), "last": max(lines)}):
        if row.line not in wanted or state_of(row, now) != LIVE:
            continue
        counts = out[row.line].setdefault(row.ref, [0, 0])
        counts[0] += row.commit == row.target
        counts[1] += 1
    return dict(out)


@functools.cache
def _counts():
    f, i, r = s.fleet_follows.c, s.fleet_instances.c, s.refs.c
    return (
        sa.select(f.line, f.ref, f.commit, r.target, *_instance_columns())
        .join(s.fleet_instances, i.name == f.instance)
        .join(s.refs, sa.and_(r.line == f.line, r.name == f.ref, r.kind == RefKind.CHANNEL))
        .where(f.line.between(sa.bindparam("first"), sa.bindparam("last")))
        .where(i.stopped_at.is_(None))
    )


def served_minutes(conn, commit: str, line: str, channel: str, instances: int = 1) -> float:
    """Minutes during which at least INSTANCES instances served COMMIT as the holder of
    LINE@CHANNEL, by the served history (an open stretch counts up to its instance's last
    report)."""
    v, i = s.fleet_served.c, s.fleet_instances.c
    q = (
        sa.select(v.start, v.until, i.seen_at)
        .join(s.fleet_instances, i.name == v.instance, isouter=True)
        .where(v.line == line, v.ref == channel, v.commit == commit, v.canary.is_(False))
    )
    events: list[tuple[dt.datetime, int]] = []
    for start, until, seen in conn.execute(q):
        end = until if until is not None else seen
        if end is None:
            continue
        start, end = as_utc(start), as_utc(end)
        if end > start:
            events += [(start, 1), (end, -1)]
    events.sort(key=lambda e: (e[0], e[1]))
    total, count, since = 0.0, 0, None
    for at, step in events:
        if count >= instances and since is not None:
            total += (at - since).total_seconds()
        count += step
        since = at
    return total / 60.0
