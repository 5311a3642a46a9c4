"""`mint log`'s reads: a revision's ancestors, or every commit, newest first, narrowed (as
git's --since, --until and --author narrow it) to a window of time and an author.

Each shape of statement is built once and run with its values bound (issue 24: building the
recursive walk for each call cost more than running it for 20 commits)."""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mint import schema as s
from mint.commits.rows import commit_row, infos
from mint.errors import InvalidConfig
from mint.ids import as_utc
from mint.objects import CommitInfo


@dataclass(frozen=True)
class Narrowing:
    """Which commits a log keeps: made at or after SINCE, at or before UNTIL, by an AUTHOR
    whose name holds AUTHOR (any case, as git's --author matches a part of the name)."""

    since: dt.datetime | None = None
    until: dt.datetime | None = None
    author: str | None = None

    @property
    def shape(self) -> tuple[bool, bool, bool]:
        return self.since is not None, self.until is not None, self.author is not None

    def params(self) -> dict:
        out: dict = {}
        if self.since is not None:
            out["since"] = self.since
        if self.until is not None:
            out["until"] = self.until
        if self.author is not None:
            escaped = self.author.lower().replace("\\", "\\\\").replace("%", "\\%")
            out["author"] = "%" + escaped.replace("_", "\\_") + "%"
        return out


def narrowing(since=None, until=None, author: str | None = None) -> Narrowing:
    """A Narrowing from what a caller gives: SINCE and UNTIL as datetimes or ISO 8601 text (a
    time without a zone is UTC), AUTHOR as text. InvalidConfig for a time that is none."""
    window = Narrowing(_moment("since", since), _moment("until", until), author or None)
    if window.since and window.until and window.since > window.until:
        raise InvalidConfig(f"since ({window.since.isoformat()}) is after until")
    return window


def _moment(what: str, value) -> dt.datetime | None:
    if value is None or isinstance(value, dt.datetime):
        return as_utc(value).astimezone(dt.UTC) if value is not None else None
    try:
        return as_utc(dt.datetime.fromisoformat(str(value))).astimezone(dt.UTC)
    except ValueError:
        raise InvalidConfig(
            f"{what} is not a time in ISO 8601 (2026-12-04T10:00Z): {value!r}"
        ) from None


def walk(
    conn: Connection, start: str, limit: int | None = None, narrow: Narrowing = Narrowing()
) -> list[CommitInfo]:
    """Ancestors of START (itself included) newest first, at most LIMIT, narrowed.

    A parent is always older than its child, so a commit more than LIMIT steps from START has
    at least LIMIT newer ancestors on its path and cannot be among the LIMIT newest: without a
    narrowing the recursive walk stops at that depth."""
    commit_row(conn, start)  # an unknown start is an error, not an empty log
    params = {"start": start, "depth": (limit or 0) - 1, "limit": limit, **narrow.params()}
    return infos(conn, conn.execute(_ancestors(bool(limit), *narrow.shape), params))


def newest(
    conn: Connection, limit: int | None = None, narrow: Narrowing = Narrowing()
) -> list[CommitInfo]:
    """Every commit newest first, at most LIMIT, narrowed."""
    params = {"limit": limit, **narrow.params()}
    return infos(conn, conn.execute(_newest(bool(limit), *narrow.shape), params))


@functools.cache
def _ancestors(limited: bool, since: bool = False, until: bool = False, author: bool = False):
    """`walk`'s statement, for each shape (a :limit or not; each narrowing or not)."""
    cp, c = s.commit_parents, s.commits.c
    start = sa.bindparam("start", type_=sa.String(64))
    anc = sa.select(start.label("id"), sa.literal(0).label("depth")).cte("anc", recursive=True)
    step = sa.select(cp.c.parent_id, anc.c.depth + 1).join(anc, cp.c.commit_id == anc.c.id)
    if limited and not (since or until or author):
        step = step.where(anc.c.depth < sa.bindparam("depth", type_=sa.Integer))
    if since:  # a parent is older than its child: the walk stops where the window begins
        step = step.join(s.commits, c.id == cp.c.parent_id)
        step = step.where(c.created_at >= sa.bindparam("since", type_=c.created_at.type))
    anc = anc.union(step)
    q = sa.select(s.commits).where(s.commits.c.id.in_(sa.select(anc.c.id)))
    return _narrowed(q, limited, since, until, author)


@functools.cache
def _newest(limited: bool, since: bool = False, until: bool = False, author: bool = False):
    """`newest`'s statement, for each shape."""
    return _narrowed(sa.select(s.commits), limited, since, until, author)


def _narrowed(q, limited: bool, since: bool, until: bool, author: bool):
    c = s.commits.c
    if since:
        q = q.where(c.created_at >= sa.bindparam("since", type_=s.commits.c.created_at.type))
    if until:
        q = q.where(c.created_at <= sa.bindparam("until", type_=s.commits.c.created_at.type))
    if author:
        q = q.where(sa.func.lower(c.author).like(sa.bindparam("author"), escape="\\"))
    q = q.order_by(c.created_at.desc(), c.id)
    return q.limit(sa.bindparam("limit", type_=sa.Integer)) if limited else q
