"""Traces and feedback in the database: batch writes from the runtime, feedback on one trace,
and the filtered listing that `traces ls` and exports read."""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from mint import schema as s
from mint.errors import InvalidFeedback, InvalidTime, TraceNotFound
from mint.ids import as_utc, iso, utcnow
from mint.objects import Trace
from mint.refs.revisions import resolve
from mint.repo import Repo

TRACE_COLUMNS = (
    "id",
    "at",
    "set_line",
    "set_commit",
    "variant",
    "label",
    "probs",
    "expert_commit",
    "user",
    "messages",
    "response",
    "latency",
)
_AGO = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True)
class TraceFilter:
    """Which traces to read; None means any."""

    set_rev: str | None = None
    since: str | dt.datetime | None = None
    label: str | None = None
    min_score: float | None = None
    variant: str | None = None
    limit: int | None = 100

    def as_dict(self) -> dict:
        since = self.since.isoformat() if isinstance(self.since, dt.datetime) else self.since
        fields = {
            "set": self.set_rev,
            "since": since,
            "label": self.label,
            "min_score": self.min_score,
            "variant": self.variant,
            "limit": self.limit,
        }
        return {k: v for k, v in fields.items() if v is not None}


def write_traces(repo: Repo, rows: Sequence[dict]) -> int:
    """Insert trace rows (dicts of the `traces` columns) in one transaction; returns how many."""
    if not rows:
        return 0
    clean = [{k: row.get(k) for k in TRACE_COLUMNS} for row in rows]
    for row in clean:
        row["at"] = row["at"] or utcnow()
        row["latency"] = row["latency"] or {}
    with repo.db.write() as conn:
        conn.execute(s.traces.insert(), clean)
    return len(clean)


def record_feedback(
    repo: Repo,
    trace_id: str,
    score: float,
    label: str | None = None,
    *,
    by: str | None = None,
) -> Trace:
    """Record SCORE (in [0, 1]) and optionally the LABEL that should have answered on a trace;
    TraceNotFound when no trace has that id. Returns the trace with this feedback.

    One feedback per trace and identity: a later one from the same BY (None, anonymous, is one
    identity too) replaces the earlier, so that no client can pile rows onto a trace; the
    latest feedback, whoever gave it, is the one that counts."""
    score = check_score(score)
    if label is not None and (not isinstance(label, str) or not label or len(label) > 100):
        raise InvalidFeedback("a label is a non-empty name of at most 100 characters")
    f = s.feedback.c
    with repo.db.write() as conn:
        # the trace's row is locked (PostgreSQL; SQLite writes one at a time): feedback on one
        # trace is recorded one at a time, so two from one identity cannot both stay
        q = sa.select(s.traces.c.probs).where(s.traces.c.id == trace_id).with_for_update()
        found = conn.execute(q).first()
        if found is None:
            raise TraceNotFound(trace_id)
        probs = found[0]
        if label is not None and probs and label not in probs:
            raise InvalidFeedback(f"{label!r} is not one of the set's labels {sorted(probs)}")
        same = f.by.is_(None) if by is None else f.by == by
        conn.execute(s.feedback.delete().where(f.trace_id == trace_id, same))
        row = {"trace_id": trace_id, "score": score, "label": label, "at": utcnow(), "by": by}
        conn.execute(s.feedback.insert().values(**row))
    return traces_get(repo, trace_id)


def check_score(score: object) -> float:
    """SCORE as a float in [0, 1]; InvalidFeedback otherwise."""
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        raise InvalidFeedback("the score must be a number from 0 to 1")
    if not math.isfinite(score) or not 0.0 <= score <= 1.0:
        raise InvalidFeedback(f"the score must be from 0 to 1, not {score}")
    return float(score)


def parse_since(value: str | dt.datetime) -> dt.datetime:
    """An ISO 8601 time (UTC when no zone is given) or an age: `30s`, `10m`, `2h`, `1d`, `1w`."""
    if isinstance(value, dt.datetime):
        return as_utc(value)
    text = str(value).strip()
    ago = _AGO.match(text)
    if ago:
        return utcnow() - dt.timedelta(seconds=float(ago[1]) * _UNIT[ago[2]])
    try:
        return as_utc(dt.datetime.fromisoformat(text))
    except ValueError:
        raise InvalidTime(text) from None


def traces_get(repo: Repo, trace_id: str) -> Trace:
    """One trace by its completion id (TraceNotFound)."""
    with repo.db.read() as conn:
        row = conn.execute(_select().where(s.traces.c.id == trace_id)).first()
    if row is None:
        raise TraceNotFound(trace_id)
    return _trace(row)


def traces_ls(
    repo: Repo,
    *,
    set_rev: str | None = None,
    since: str | dt.datetime | None = None,
    label: str | None = None,
    min_score: float | None = None,
    variant: str | None = None,
    limit: int | None = 100,
) -> list[Trace]:
    """Traces newest first, with their latest feedback. SET_REV is a set line (every commit
    of it) or any revision of one set commit; SINCE an ISO time or an age (`2h`); MIN_SCORE
    keeps only traces whose latest feedback scored at least that; LIMIT None reads them all."""
    wanted = TraceFilter(set_rev, since, label, min_score, variant, limit)
    return select_traces(repo, wanted)


def select_traces(repo: Repo, wanted: TraceFilter, *, oldest_first: bool = False) -> list[Trace]:
    """The traces WANTED names (see `traces_ls`)."""
    t = s.traces.c
    with repo.db.read() as conn:
        q = _select()
        if wanted.set_rev is not None:
            q = q.where(_set_clause(conn, wanted.set_rev))
        if wanted.since is not None:
            q = q.where(t.at >= parse_since(wanted.since))
        if wanted.label is not None:
            q = q.where(t.label == wanted.label)
        if wanted.variant is not None:
            q = q.where(t.variant == wanted.variant)
        if wanted.min_score is not None:
            q = q.where(_LATEST.c.score >= check_score(wanted.min_score))
        order = (t.at, t.id) if oldest_first else (t.at.desc(), t.id.desc())
        q = q.order_by(*order)
        if wanted.limit is not None:
            q = q.limit(max(0, int(wanted.limit)))
        return [_trace(row) for row in conn.execute(q)]


def _set_clause(conn: sa.Connection, rev: str):
    """A set line's name selects every commit of it; any other revision one commit."""
    line = conn.execute(sa.select(s.lines.c.name).where(s.lines.c.name == rev)).first()
    if line is not None:
        return s.traces.c.set_line == rev
    return s.traces.c.set_commit == resolve(conn, rev).id


# A trace's latest feedback, joined once: its score, label and giver.
_LATEST = s.feedback.alias("latest_feedback")


def _select():
    newest = s.feedback.alias("newest")
    last = (
        sa.select(sa.func.max(newest.c.id))
        .where(newest.c.trace_id == s.traces.c.id)
        .correlate(s.traces)
        .scalar_subquery()
    )
    f = _LATEST.c
    return sa.select(
        *s.traces.c,
        f.score.label("score"),
        f.label.label("feedback_label"),
        f.by.label("feedback_by"),
    ).select_from(s.traces.outerjoin(_LATEST, f.id == last))


def _trace(row) -> Trace:
    m = row._mapping
    return Trace(
        id=m["id"],
        at=iso(m["at"]),
        set_line=m["set_line"],
        set_commit=m["set_commit"],
        variant=m["variant"],
        label=m["label"],
        probs=m["probs"],
        expert_commit=m["expert_commit"],
        user=m["user"],
        messages=m["messages"],
        response=m["response"],
        latency=m["latency"] or {},
        score=m["score"],
        feedback_label=m["feedback_label"],
        feedback_by=m["feedback_by"],
    )
