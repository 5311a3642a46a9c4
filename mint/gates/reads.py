"""What a move reads in its transaction, each a statement built once.

A promote or rollback runs a handful of statements, and on SQLite building each one (its
aliases, subqueries and joins) cost more than running it: these are built on first use, with
bound parameters, and reused, so a call only binds its values. Each reads on indexes: a probe
per row it returns, whatever the size of the catalog.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import sqlalchemy as sa

from mint import schema as s
from mint.gates.contracts import counted_sources, covers, guard_is_old
from mint.ids import EvalSource, RefKind
from mint.refs.container import Ref, ref_of


def _signed():
    """Whether moves of the bound CHANNEL need a signature (NULL: not protected)."""
    p = s.protected_channels.c
    return sa.select(p.signed).where(p.channel == sa.bindparam("channel")).scalar_subquery()


@functools.cache
def _candidate(by_prefix: bool):
    """The commit (by the bound CID, or BY_PREFIX: the bound REV, a hex prefix, up to END),
    its line, that line's ref named CHANNEL and the channel's signing rule; by prefix, also
    whether a line is named REV (then the line is what REV names)."""
    c, r = s.commits.c, s.refs.c
    on = sa.and_(r.line == c.line, r.name == sa.bindparam("channel"))
    q = sa.select(c.id, c.line, _signed().label("signed"), r.kind, r.target, r.entry, r.message)
    q = q.add_columns(r.updated_at, r.name).select_from(s.commits.outerjoin(s.refs, on))
    if not by_prefix:
        return q.where(c.id == sa.bindparam("cid"))
    rev = sa.bindparam("rev", type_=c.id.type)
    a_line = sa.select(s.lines.c.id).where(s.lines.c.name == rev).scalar_subquery()
    q = q.add_columns(a_line.label("a_line")).where(c.id >= rev, c.id < sa.bindparam("end"))
    return q.order_by(c.id).limit(2)


def candidate_by_prefix(conn, rev: str, channel: str):
    """`candidate` of the one commit whose id starts with REV (a hex prefix), or None when
    none or several do, or a line is named REV (the resolver decides those)."""
    params = dict(rev=rev, end=rev + "g", channel=channel)
    found = conn.execute(_candidate(True), params).all()
    if len(found) == 1 and found[0].a_line is None:
        return _candidate_of(found[0])
    return None


def candidate(conn, cid: str, channel: str) -> tuple[str, str, Ref | None, bool] | None:
    """(CID, its line, that line's ref CHANNEL or None, whether CHANNEL moves only signed),
    or None when there is no commit CID."""
    row = conn.execute(_candidate(False), dict(cid=cid, channel=channel)).first()
    return None if row is None else _candidate_of(row)


def _candidate_of(row) -> tuple[str, str, Ref | None, bool]:
    current = ref_of(row) if row.target is not None else None
    return row.id, row.line, current, bool(row.signed)


# --- rollback ------------------------------------------------------------------------


class Replaced(NamedTuple):
    """Of the history row a rollback restores: what the rollback's own row repeats."""

    new: str
    contract: str | None
    evaluations: list | None
    back: int | None


@functools.cache
def _channel_state():
    r = s.refs.c
    top, back = s.ref_history.alias("top"), s.ref_history.alias("back")
    replaced = (back.c.id, back.c.new, back.c.contract, back.c.evaluations, back.c.back)
    q = sa.select(s.refs, _signed().label("signed"), *(c.label(f"b_{c.name}") for c in replaced))
    q = q.select_from(
        s.refs.outerjoin(top, top.c.id == r.entry).outerjoin(back, back.c.id == top.c.back)
    )
    return q.where(r.line == sa.bindparam("line"), r.name == sa.bindparam("channel"))


def channel_state(conn, line: str, channel: str) -> tuple[Ref | None, Replaced | None, bool]:
    """LINE@CHANNEL's ref (None: no such ref), the history row its current holder replaced
    (the entry a rollback restores: its `back`; None when there is none) and whether the
    channel moves only when signed: one query."""
    row = conn.execute(_channel_state(), dict(line=line, channel=channel)).first()
    if row is None:
        return None, None, False
    target = None
    if row.b_id is not None:
        target = Replaced(row.b_new, row.b_contract, row.b_evaluations, row.b_back)
    return ref_of(row), target, bool(row.signed)


# --- the gate ------------------------------------------------------------------------


class Evaluated(NamedTuple):
    """A contract version guarding a channel (its contracts row), with the latest evaluation
    of the candidate under it (id and metrics; None when there is none) and the metrics of
    the holder's latest evaluation under any version of it (None: none, or no holder)."""

    row: object
    found_id: int | None
    found_metrics: object
    holder_metrics: object


@functools.cache
def _guards_evaluated():
    c, e, named = s.contracts.c, s.evaluations.c, s.contracts
    counted = e.source != EvalSource.MODEL_CARD  # a contract naming its `sources`: in Python
    latest = sa.select(e.id).where(e.commit_id == sa.bindparam("cid"), e.contract_id == c.id)
    latest = latest.where(counted).order_by(e.id.desc()).limit(1).correlate(named)
    version = s.contracts.alias("version")
    held = sa.select(e.metrics).join(version, version.c.id == e.contract_id)
    held = held.where(e.commit_id == sa.bindparam("holder", type_=e.commit_id.type), counted)
    held = held.where(version.c.name == c.name, version.c.scope == c.scope)
    held = held.order_by(version.c.version.desc(), e.id.desc())
    q = sa.select(
        named,
        latest.scalar_subquery().label("found_id"),
        latest.with_only_columns(e.metrics).scalar_subquery().label("found_metrics"),
        held.limit(1).correlate(named).scalar_subquery().label("holder_metrics"),
    )
    return q.where(c.channel == sa.bindparam("channel"), ~guard_is_old()).order_by(c.name)


def guards_evaluated(conn, line: str, channel: str, cid: str, holder: str | None) -> list:
    """The latest versions of the contracts guarding LINE@CHANNEL, by name, each with the
    candidate CID's and the HOLDER's latest evaluations (`Evaluated`): one query, each
    evaluation a correlated subquery on the (commit, contract, id) index."""
    params = dict(cid=cid, holder=holder, channel=channel)
    return [
        Evaluated(r, r.found_id, r.found_metrics, r.holder_metrics)
        if "sources" not in r.body
        else counted_evaluated(conn, r, cid, holder)
        for r in conn.execute(_guards_evaluated(), params)
        if covers(r.lines, line)
    ]


def counted_evaluated(conn, row, cid: str, holder: str | None) -> Evaluated:
    """`Evaluated` of one contracts ROW, counting only the evaluation sources it counts."""
    e, c = s.evaluations.c, s.contracts.c
    sources = counted_sources(row.body)
    q = sa.select(e.id, e.metrics).where(e.commit_id == cid, e.contract_id == row.id)
    found = conn.execute(q.where(e.source.in_(sources)).order_by(e.id.desc()).limit(1)).first()
    prev = None
    if holder is not None:
        q = sa.select(e.metrics).join(s.contracts, c.id == e.contract_id)
        q = q.where(e.commit_id == holder, c.name == row.name, c.scope == row.scope)
        q = q.where(e.source.in_(sources)).order_by(c.version.desc(), e.id.desc())
        prev = conn.execute(q.limit(1)).scalar()
    return Evaluated(row, found.id if found else None, found.metrics if found else {}, prev)


@functools.cache
def _held():
    h = s.ref_history.c
    q = sa.select(h.id).where(
        h.line == sa.bindparam("line"),
        h.name == sa.bindparam("channel"),
        h.new == sa.bindparam("cid"),
        h.kind == RefKind.CHANNEL,
    )
    return q.limit(1)


def has_held(conn, cid: str, line: str, channel: str) -> bool:
    """Whether commit CID has held LINE@CHANNEL (its history, on the (line, name, new) index)."""
    params = dict(line=line, channel=channel, cid=cid)
    return conn.execute(_held(), params).first() is not None
