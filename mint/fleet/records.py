"""Recording a serving process's report: the instance, what it follows and serves, the served
history, and failed stagings by reason, in one transaction.

The served history is what the repository saw: a stretch of serving never starts before the
registry first heard of the process (a report cannot back-date evidence a gate reads), nor
before the stretch it follows. When an instance was unseen for longer than three of its report
intervals, or restarted, its open stretches end where it was last seen, and the next begins
no earlier: the gap is where nothing is known. Within one process, a switch starts at the
time the process gives (`since`), kept between the stretch it ends and now.
"""

from __future__ import annotations

import datetime as dt
import functools
from types import SimpleNamespace

import sqlalchemy as sa

from mint import schema as s
from mint.db import insert_new
from mint.errors import TooManyInstances, UnknownServedCommit
from mint.fleet.report import Following, Report, report_from
from mint.ids import as_utc, utcnow
from mint.repo import Repo

MAX_LIVE = 4096  # live instances one identity reports for (`registry serve` may change it)
STALE_AFTER = 3  # report intervals an instance may be unseen before it is stale


def fleet_report(
    repo: Repo, report: dict, *, by: str, max_live: int = MAX_LIVE, now: dt.datetime | None = None
) -> None:
    """Record REPORT (a serving process's, see `mint.fleet.report`), made by BY: InvalidReport
    for a malformed one, UnknownServedCommit for a commit that is not on the line it follows,
    TooManyInstances when BY already reports for MAX_LIVE live instances and this one is new.
    Nothing is written when it is refused. NOW: the registry's time (tests only)."""
    checked = report_from(report)
    now = now or utcnow()
    with repo.db.write() as conn:
        prev, follows = _instance(conn, checked.instance)
        _check_commits(conn, checked, follows)
        if prev is None or prev.stopped_at is not None or _stale(prev, now):
            _check_bound(conn, by, checked.instance, max_live, now)
        fresh = prev is None or as_utc(prev.started_at) != checked.started_at
        gap = prev is not None and (fresh or _stale(prev, now) or prev.stopped_at is not None)
        floor = now if fresh else as_utc(prev.first_seen)
        if gap:  # what it served while unseen is not known: its stretches end where it was
            _close_all(conn, checked.instance, as_utc(prev.seen_at))
            floor = max(floor, as_utc(prev.seen_at))
        _save_instance(conn, checked, by, now, fresh, prev)
        for f in checked.names:
            old = follows.pop(f.name, None)
            _record_name(conn, checked.instance, f, old, floor, now, moved=gap or _moved(old, f))
        for name in follows:  # names it no longer follows: their stretches end now
            _close(conn, checked.instance, name, None, now)
            _delete_follow(conn, checked.instance, name)
        if checked.stopped:  # a goodbye: what it served ends now (it is shown stopped)
            _close_all(conn, checked.instance, now)


def _stale(row, now: dt.datetime) -> bool:
    return now > as_utc(row.stale_at)


def _moved(old, f: Following) -> bool:
    """Whether F serves other commits than its row OLD says (None: a name new to it)."""
    return old is None or (old.commit, old.canary) != (f.commit, f.canary)


def _check_commits(conn, report: Report, follows: dict) -> None:
    """Every commit REPORT names is a commit of the line its name follows (those its rows in
    FOLLOWS hold already were checked when they came)."""
    known = {
        (name, c)
        for name, row in follows.items()
        for c in (row.commit, row.canary, row.failed_commit)
        if c
    }
    named = {c for f in report.names for c in f.commits() if (f.name, c) not in known}
    if not named:
        return
    c = s.commits.c
    lines = dict(conn.execute(sa.select(c.id, c.line).where(c.id.in_(named))).all())
    for f in report.names:
        for commit in f.commits():
            if (f.name, commit) not in known and lines.get(commit) != f.line:
                raise UnknownServedCommit(f.name, commit)


def _instance(conn, name: str) -> tuple:
    """(the instance's row or None, its follows rows by name), in one statement; on
    PostgreSQL the instance's row is locked: two replicas recording one instance take turns."""
    rows = conn.execute(_instance_query(conn.dialect.name == "postgresql"), {"n": name}).all()
    if not rows:
        return None, {}
    theirs = _follow_columns()
    follows = {
        row.f_name: SimpleNamespace(**{c: getattr(row, f"f_{c}") for c in theirs})
        for row in rows
        if row.f_name is not None
    }
    return rows[0], follows


def _follow_columns() -> list[str]:
    return [c.name for c in s.fleet_follows.c if c.name != "instance"]


@functools.cache
def _instance_query(lock: bool):
    """`_instance`'s statement, built once (a report is the registry's most frequent write)."""
    i, f = s.fleet_instances, s.fleet_follows
    q = (
        sa.select(*i.c, *(f.c[c].label(f"f_{c}") for c in _follow_columns()))
        .select_from(i.outerjoin(f, f.c.instance == i.c.name))
        .where(i.c.name == sa.bindparam("n"))
    )
    return q.with_for_update(of=i) if lock else q


def _check_bound(conn, by: str, instance: str, max_live: int, now: dt.datetime) -> None:
    """BY may report for one more live instance (INSTANCE, new or back from stale)."""
    i = s.fleet_instances.c
    q = sa.select(sa.func.count()).where(
        i.token == by, i.stale_at >= now, i.stopped_at.is_(None), i.name != instance
    )
    if conn.execute(q).scalar() >= max_live:
        raise TooManyInstances(by, max_live)


def _save_instance(conn, r: Report, by: str, now, fresh: bool, prev) -> None:
    values = dict(
        token=by,
        engine=r.engine,
        base=r.base,
        version=r.version,
        interval=r.interval,
        started_at=r.started_at,
        seen_at=now,
        stale_at=now + dt.timedelta(seconds=STALE_AFTER * r.interval),
        stopped_at=now if r.stopped else None,
        dropped=r.dropped,
    )
    if fresh:
        values["first_seen"] = now
    update = _instance_update(tuple(sorted(values)))
    if prev is None and insert_new(conn, s.fleet_instances, {"name": r.instance, **values}):
        return
    # known (or another replica recorded its first report a moment ago)
    conn.execute(update, {"w_name": r.instance, **{f"v_{k}": v for k, v in values.items()}})


@functools.cache
def _instance_update(keys: tuple[str, ...]):
    """The UPDATE of an instance's row setting KEYS, built once per set of keys."""
    i = s.fleet_instances
    values = {k: sa.bindparam(f"v_{k}", type_=i.c[k].type) for k in keys}
    return i.update().where(i.c.name == sa.bindparam("w_name")).values(values)


def _record_name(conn, instance: str, f: Following, old, floor, now, *, moved: bool) -> None:
    """F's state, its served stretches (the holder's and a canary's; unless it serves what
    its row OLD says, and no gap ended them: not MOVED) and its failure count."""
    if moved:
        _stretch(conn, instance, f, False, f.commit, None, f.since, floor, now)
        _stretch(conn, instance, f, True, f.canary, f.fraction, f.canary_since, floor, now)
    failure = f.failure
    if failure is not None and (old is None or _changed_failure(old, failure)):
        _count_failure(conn, failure.kind, now)
    values = dict(
        line=f.line,
        ref=f.ref,
        commit=f.commit,
        since=f.since,
        canary=f.canary,
        fraction=f.fraction,
        canary_since=f.canary_since,
        failed_commit=failure.commit if failure else None,
        failed_at=failure.at if failure else None,
        failure_kind=failure.kind if failure else None,
        failure=failure.reason if failure else None,
    )
    if old is not None and _same(old, values):
        return
    ff = s.fleet_follows.c
    if old is None:
        conn.execute(s.fleet_follows.insert().values(instance=instance, name=f.name, **values))
    else:
        where = (ff.instance == instance, ff.name == f.name)
        conn.execute(s.fleet_follows.update().where(*where).values(**values))


def _same(row, values: dict) -> bool:
    for key, value in values.items():
        stored = getattr(row, key)
        if isinstance(stored, dt.datetime):
            stored = as_utc(stored)
        if stored != value:
            return False
    return True


def _changed_failure(old, failure) -> bool:
    return old.failed_at is None or as_utc(old.failed_at) != failure.at


def _count_failure(conn, kind: str, now) -> None:
    t = s.fleet_failures.c
    done = conn.execute(
        s.fleet_failures.update().where(t.kind == kind).values(count=t.count + 1, last_at=now)
    ).rowcount
    if not done and not insert_new(conn, s.fleet_failures, dict(kind=kind, count=1, last_at=now)):
        conn.execute(
            s.fleet_failures.update().where(t.kind == kind).values(count=t.count + 1, last_at=now)
        )


def _stretch(conn, instance: str, f: Following, canary: bool, commit, fraction, since, floor, now):
    """Keep INSTANCE's open stretch of F (the holder's, or CANARY's) serving COMMIT. A switch
    ends the open stretch where the next begins: at SINCE, kept between the open one's start
    and NOW. A stretch that follows none begins at SINCE if that lies after FLOOR (and after
    the last stretch of its kind) and not after NOW, else NOW: what came before was not seen."""
    open_row = _open(conn, instance, f.name, canary)
    if open_row is not None and open_row.commit == commit:
        return
    if open_row is not None:
        start = now if since is None else min(max(since, as_utc(open_row.start)), now)
        _end(conn, open_row.id, start)
    else:
        low = max(floor, _last_end(conn, instance, f.name, canary) or floor)
        start = since if since is not None and low < since <= now else now
    if commit is None:
        return
    row = dict(instance=instance, name=f.name, line=f.line, ref=f.ref, commit=commit)
    row |= dict(canary=canary, fraction=fraction, start=start)
    conn.execute(s.fleet_served.insert().values(**row))


def _last_end(conn, instance: str, name: str, canary: bool):
    v = s.fleet_served.c
    q = sa.select(sa.func.max(v.until)).where(
        v.instance == instance, v.name == name, v.canary == canary
    )
    found = conn.execute(q).scalar()
    return as_utc(found) if found is not None else None


def _open(conn, instance: str, name: str, canary: bool):
    v = s.fleet_served.c
    q = sa.select(v.id, v.commit, v.start).where(
        v.instance == instance, v.name == name, v.canary == canary, v.until.is_(None)
    )
    return conn.execute(q).first()


def _end(conn, row_id: int, at) -> None:
    v = s.fleet_served.c
    conn.execute(s.fleet_served.update().where(v.id == row_id).values(until=at))


def _close(conn, instance: str, name: str | None, canary: bool | None, at) -> None:
    """End INSTANCE's open stretches (of NAME, of that CANARY kind, when given) at AT, or at
    their start if AT is before it."""
    v = s.fleet_served.c
    where = [v.instance == instance, v.until.is_(None)]
    if name is not None:
        where.append(v.name == name)
    if canary is not None:
        where.append(v.canary == canary)
    ends = sa.case((v.start > at, v.start), else_=sa.literal(at, s.fleet_served.c.start.type))
    conn.execute(s.fleet_served.update().where(*where).values(until=ends))


def _close_all(conn, instance: str, at) -> None:
    _close(conn, instance, None, None, at)


def _delete_follow(conn, instance: str, name: str) -> None:
    ff = s.fleet_follows.c
    conn.execute(s.fleet_follows.delete().where(ff.instance == instance, ff.name == name))
