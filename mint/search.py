"""Search commits by what they record: meta, evaluation metrics, tags, line and author.

As MLflow's `search_model_versions` does, `search` returns the commits that meet every
condition (they are AND-ed), newest first, as `log` shows them. Each condition is one index
range: a commit's meta is kept as (key, value) rows in `commit_meta` and each evaluation's
numeric metrics as (name, value) rows in `evaluation_metrics`, both written in the
transaction that stores the commit or the evaluation (`mint.commits.indexes`: every door
goes through it), so that a search never reads a JSON column.

A meta value is matched as text: a string as it is, anything else as its JSON (`--meta
epochs=3` finds `{"epochs": 3}`). A commit meets the metric conditions on NAME when one of
its evaluations recorded NAME with a number that meets them all (`acc>0.4 acc<0.5`: one
evaluation between the two).
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mint import schema as s
from mint.commits.rows import infos
from mint.errors import InvalidQuery
from mint.objects import CommitInfo

_IN_MAX = 500  # lines named in one IN (...); more are matched here, row by row
_FEW = 2000  # a condition met by fewer commits drives the query (see _select)
_WINDOW = 2000  # commits in the first window read newest first (see _windows)

_OPS = {
    ">=": lambda col, x: col >= x,
    "<=": lambda col, x: col <= x,
    ">": lambda col, x: col > x,
    "<": lambda col, x: col < x,
    "=": lambda col, x: col == x,
}
_METRIC = re.compile(r"^\s*([^<>=\s]+)\s*(>=|<=|>|<|=)\s*([^<>=\s]+)\s*$")


@dataclass(frozen=True)
class MetricCondition:
    name: str
    op: str
    value: float


@dataclass(frozen=True)
class Query:
    """A search's conditions, checked (`parse_query`)."""

    meta: tuple[tuple[str, str], ...] = ()
    metrics: tuple[MetricCondition, ...] = ()
    tags: tuple[str, ...] = ()
    line: str | None = None
    author: str | None = None
    n: int | None = None


# --- the conditions ---------------------------------------------------------------------


def parse_query(
    meta: Iterable[str] = (),
    metric: Iterable[str] = (),
    tag: Iterable[str] = (),
    line: str | None = None,
    author: str | None = None,
    n: int | None = None,
) -> Query:
    """The conditions as given on the command line or in a URL's query (META: KEY=VALUE,
    METRIC: NAME>=X with >=, >, <=, < or =), checked; InvalidQuery names the first that is
    not one."""
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise InvalidQuery(f"-n {n}", "the number of commits is 1 or more")
    return Query(
        tuple(_meta_condition(m) for m in meta),
        tuple(_metric_condition(m) for m in metric),
        tuple(_named(t, "a tag") for t in tag),
        _named(line, "a line glob") if line is not None else None,
        _named(author, "an author") if author is not None else None,
        n,
    )


def _meta_condition(text: str) -> tuple[str, str]:
    key, sep, value = str(text).partition("=")
    if not sep or not key.strip():
        raise InvalidQuery(text, "a meta condition is KEY=VALUE")
    return key, value


def _metric_condition(text: str) -> MetricCondition:
    found = _METRIC.match(str(text))
    if found is None:
        raise InvalidQuery(text, "a metric condition is NAME>=X (or >, <=, <, =) with a number X")
    name, op, number = found.groups()
    try:
        value = float(number)
    except ValueError:
        raise InvalidQuery(text, f"{number!r} is not a number") from None
    if not math.isfinite(value):
        raise InvalidQuery(text, f"{number!r} is not a finite number")
    return MetricCondition(name, op, value)


def _named(text: str, what: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InvalidQuery(str(text), f"{what} is not empty")
    return text


# --- the search --------------------------------------------------------------------------


def search(
    repo,
    *,
    meta: Iterable[str] = (),
    metric: Iterable[str] = (),
    tag: Iterable[str] = (),
    line: str | None = None,
    author: str | None = None,
    n: int | None = None,
    readable: Callable[[str], bool] | None = None,
) -> list[CommitInfo]:
    """The commits that meet every condition, newest first, at most N (see the module).

    META: KEY=VALUE; METRIC: NAME>=X (or >, <=, <, =); TAG: a tag's name on any line;
    LINE: a glob of line names ('*', '?', '[...]'); AUTHOR: exactly. READABLE (a registry
    passes its token's check) limits the result to the lines it allows."""
    query = parse_query(meta, metric, tag, line, author, n)
    with repo.db.read() as conn:
        if conn.dialect.name == "postgresql":
            # each query planned for its values (a window's time, how many meet a condition):
            # a prepared statement's generic plan joins every commit that meets each one
            conn.exec_driver_sql("SET LOCAL plan_cache_mode = force_custom_plan")
        lines = _lines(conn, query.line, readable)
        if lines is not None and not lines:
            return []
        many = lines is not None and len(lines) > _IN_MAX
        q, driven = _select(conn, query, None if many else lines)
        windows = [(None, None)] if driven or query.n is None else _windows(conn)
        found = _take(conn, q, windows, lines if many else None, query.n)
        return infos(conn, found)


class _Condition:
    """A condition on a side table: the ids of the commits that meet it (one index range),
    and the same as a test of one commit (one index probe)."""

    def __init__(self, on, *where):
        self.ids = sa.select(on).where(*where)
        self.probe = sa.exists().where(on == s.commits.c.id, *where)

    def counted(self, cap: int):
        """How many commits meet it, counted up to CAP (one index range of at most CAP)."""
        found = self.ids.limit(cap).subquery()
        return sa.select(sa.func.count()).select_from(found).scalar_subquery()


def _conditions(query: Query) -> list[_Condition]:
    cm, em, r = s.commit_meta.c, s.evaluation_metrics.c, s.refs.c
    found = [
        _Condition(cm.commit_id, cm.key == key, cm.value == value) for key, value in query.meta
    ]
    names = dict.fromkeys(m.name for m in query.metrics)
    found += [
        _Condition(
            em.commit_id,
            em.name == name,
            *(_OPS[m.op](em.value, m.value) for m in query.metrics if m.name == name),
        )
        for name in names
    ]
    found += [_Condition(r.target, r.name == t, r.kind == "tag") for t in query.tags]
    return found


def _select(conn: Connection, query: Query, lines: set[str] | None) -> tuple:
    """(the query, whether a condition drives it). A condition that few commits meet (under
    _FEW) gives their ids, which are sorted; otherwise the commits are read newest first, a
    window at a time (`_windows`), and each is probed, until N meet every condition. Either
    way a few thousand index entries are read, and no JSON column."""
    c = s.commits.c
    q = sa.select(s.commits)
    conditions = _conditions(query)
    driver = _fewest(conn, conditions)
    for x in conditions:
        q = q.where(c.id.in_(x.ids) if x is driver else x.probe)
    if query.author is not None:
        q = q.where(c.author == query.author)
    if lines is not None:
        q = q.where(c.line.in_(sorted(lines)))
    return q.order_by(c.created_at.desc(), c.id), driver is not None


def _fewest(conn: Connection, conditions: list[_Condition]) -> _Condition | None:
    """The condition fewest commits meet if that is under _FEW, else None: one query."""
    if not conditions:
        return None
    counts = conn.execute(sa.select(*(x.counted(_FEW) for x in conditions))).one()
    fewest = min(range(len(conditions)), key=lambda i: counts[i])
    return conditions[fewest] if counts[fewest] < _FEW else None


def _lines(conn: Connection, glob: str | None, readable) -> set[str] | None:
    """The names of the lines GLOB matches and READABLE allows; None: every line."""
    if glob is None and readable is None:
        return None
    if glob is not None and not any(ch in glob for ch in "*?[") and readable is None:
        return {glob}
    names = conn.execute(sa.select(s.lines.c.name)).scalars().all()
    found = {
        name
        for name in names
        if (glob is None or fnmatch.fnmatchcase(name, glob))
        and (readable is None or readable(name))
    }
    return None if len(found) == len(names) else found


def _windows(conn: Connection):
    """(from, until) times of the newest _WINDOW commits, then the next 3 x _WINDOW, and so on
    four times larger each (the last without a lower bound). With a bound a planner knows how
    few rows it reads newest first; without one, PostgreSQL joins every commit that meets each
    condition."""
    c, until, k = s.commits.c, None, _WINDOW
    while True:
        q = sa.select(c.created_at).order_by(c.created_at.desc()).offset(k).limit(1)
        since = conn.execute(q).scalar()
        yield since, until
        if since is None:
            return
        until, k = since, k * 4


def _take(conn: Connection, q, windows, lines: set[str] | None, n: int | None) -> list:
    """Q's rows in each window (from, until) in turn, until N (None: all); with LINES (more
    than one IN holds), those on them, read in order."""
    c, found = s.commits.c, []
    for since, until in windows:
        w = q if since is None else q.where(c.created_at >= since)
        w = w if until is None else w.where(c.created_at < until)
        found += _rows(conn, w, lines, n - len(found) if n else None)
        if n and len(found) >= n:
            break
    return found


def _rows(conn: Connection, q, lines: set[str] | None, n: int | None) -> list:
    if lines is None:
        return conn.execute(q.limit(n) if n else q).all()
    found = []
    with conn.execute(q.execution_options(yield_per=min(n or 1000, 1000) * 2)) as rows:
        for row in rows:
            if row.line in lines:
                found.append(row)
                if n and len(found) == n:
                    break
    return found
