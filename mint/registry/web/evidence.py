"""The evidence a move rests on, as the channel page shows it: the evaluations the history row
names, with the table of their metric checks against the holder the move replaced, and the
approvals of the moved-to commit for the channel recorded up to the move.

Only the contract version and evaluation ids are stored beside a move (`mint.gates.promotion`);
the table is recomputed here from them with the gate's own `metric_checks`, comparing with
the replaced holder's latest evaluation recorded before the move. The gate's other rows at a
promote or a force (an evaluation missing under a contract, the channels it requires held, the
approvals) are recomputed the same way, from the contract versions that guarded the channel
then, the history before the move and the approvals recorded up to it: a forced move shows
every check that made the force necessary."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from mint import api
from mint import schema as s
from mint.gates.checks import (
    approval_count,
    approvals_check,
    held_row,
    metric_checks,
    missing_evaluation,
)
from mint.gates.contracts import contract_row
from mint.ids import Action, RefKind, as_utc, iso
from mint.objects import Check, Evaluation, Move
from mint.repo import Repo


def _evaluations(repo: Repo, commit: str, cache: dict[str, list[Evaluation]]) -> list[Evaluation]:
    if commit not in cache:
        cache[commit] = api.evaluations_of(repo, commit)
    return cache[commit]


def _holder_metrics(evals: list[Evaluation], contract: str, at: str) -> dict | None:
    """The replaced holder's latest evaluation under CONTRACT (any version) before AT."""
    earlier = [e for e in evals if e.contract == contract and e.at <= at]
    if not earlier:
        return None
    return max(earlier, key=lambda e: (e.version, e.id)).metrics


def of_move(repo: Repo, move: Move, cache: dict) -> list[tuple[Evaluation, list[Check]]]:
    """Each evaluation MOVE names, with its checks as the gate saw them."""
    wanted = set(move.evaluations)
    if not wanted:
        return []
    found = [e for e in _evaluations(repo, move.to, cache) if e.id in wanted]
    out = []
    for e in found:
        key = f"contract {e.contract_id}"
        if key not in cache:
            cache[key] = api.contract_show(repo, e.contract, e.version, move.line).metrics
        body = {"metrics": cache[key]}
        held = _evaluations(repo, move.from_, cache) if move.from_ else []
        prev = _holder_metrics(held, e.contract, move.at) if move.from_ else None
        out.append((e, metric_checks(body, e.metrics, prev, move.from_)))
    return out


def approvals_of(repo: Repo, moves: list[Move]) -> dict[int, list[tuple[str, str]]]:
    """Move id -> (by, at) of each approval of the move's commit for its channel recorded up
    to the move, oldest first, for the promotes and forces among MOVES (a rollback has none:
    no gate guards it). One query for the page of moves."""
    gated = _gated(moves)
    if not gated:
        return {}
    a = s.approvals.c
    q = (
        sa.select(a.commit_id, a.channel, a.by, a.at)
        .where(a.commit_id.in_({m.to for m in gated}), a.channel.in_({m.channel for m in gated}))
        .order_by(a.at, a.id)
    )
    with repo.db.read() as conn:
        found = conn.execute(q).all()
    out: dict[int, list[tuple[str, str]]] = {}
    for m in gated:
        at = _moment(m.at)
        mine = [r for r in found if (r.commit_id, r.channel) == (m.to, m.channel)]
        out[m.id] = [(r.by, iso(r.at)) for r in mine if as_utc(r.at) <= at]
    return out


def _gated(moves: list[Move]) -> list[Move]:
    """The moves a gate checked: promotes and forces."""
    return [m for m in moves if m.action in (Action.PROMOTE, Action.FORCE) and m.to]


def _moment(at: str) -> dt.datetime:
    return as_utc(dt.datetime.fromisoformat(at))


def guards_at(conn, line: str, channel: str, at: dt.datetime, named: str | None, cache) -> list:
    """The contract versions (rows) that guarded LINE@CHANNEL at AT, as the gate then chose
    them (each name's latest version by then), and NAMED (the version the move stored) when a
    promote named it beyond them. CACHE keeps the channel's contract rows for the page."""
    key = f"contracts on {channel}"
    if key not in cache:
        c = s.contracts.c
        on_channel = sa.select(c.name).where(c.channel == channel)
        cache[key] = conn.execute(sa.select(s.contracts).where(c.name.in_(on_channel))).all()
    latest: dict = {}
    for row in cache[key]:
        known = latest.get(row.name)
        if as_utc(row.created_at) <= at and (known is None or row.version > known.version):
            latest[row.name] = row
    rows = [
        r
        for _, r in sorted(latest.items())
        if r.channel == channel and (not r.lines or line in r.lines)
    ]
    if named and named not in {r.id for r in rows}:
        rows.append(contract_row(conn, named))
    return rows


def gate_rows(repo: Repo, moves: list[Move], cache: dict) -> dict[int, list[Check]]:
    """Move id -> the gate's rows at that move (a promote or a force) beyond the metric tables
    of the evaluations it names: for each contract version that guarded the channel then, a
    missing evaluation (and its metrics, not found), the channels it requires held before the
    move, and the approvals recorded up to it. A few queries for the whole page of moves."""
    gated = _gated(moves)
    if not gated:
        return {}
    with repo.db.read() as conn:
        named = _contracts_of(conn, [i for m in gated for i in m.evaluations])
        guards = {
            m.id: guards_at(conn, m.line, m.channel, _moment(m.at), m.contract, cache)
            for m in gated
        }
        required = {ch for rows in guards.values() for r in rows for ch in r.body["requires"]}
        first = _first_held(conn, gated[0].line, required, {m.to for m in gated})
        return {m.id: _gate_at(conn, repo, m, guards[m.id], named, first, cache) for m in gated}


def _gate_at(conn, repo: Repo, move: Move, guards, named, first, cache) -> list[Check]:
    out, mine = [], {named[i] for i in move.evaluations if i in named}
    for row in guards:
        if row.id not in mine:
            out += _missing(repo, move, row, cache)
        for ch in row.body["requires"]:
            entry = first.get((ch, move.to))
            out.append(held_row(move.line, ch, entry is not None and entry < move.id))
        if row.body["approvals"]:
            n = approval_count(conn, move.to, move.channel, _moment(move.at))
            out.append(approvals_check(n, row))
    return out


def _contracts_of(conn, evaluations: list[int]) -> dict[int, str]:
    """Evaluation id -> its contract version, for the evaluations the moves name."""
    if not evaluations:
        return {}
    e = s.evaluations.c
    q = sa.select(e.id, e.contract_id).where(e.id.in_(set(evaluations)))
    return dict(conn.execute(q).all())


def _first_held(conn, line: str, channels: set[str], commits: set[str]) -> dict:
    """(channel, commit) -> the first history entry that put COMMIT on LINE@CHANNEL."""
    if not channels:
        return {}
    h = s.ref_history.c
    q = (
        sa.select(h.name, h.new, sa.func.min(h.id))
        .where(h.line == line, h.kind == RefKind.CHANNEL, h.name.in_(channels))
        .where(h.new.in_(commits))
        .group_by(h.name, h.new)
    )
    return {(name, new): first for name, new, first in conn.execute(q)}


def _missing(repo: Repo, move: Move, row, cache: dict) -> list[Check]:
    """The rows of contract version ROW when MOVE's commit had no evaluation under it."""
    held = _evaluations(repo, move.from_, cache) if move.from_ else []
    prev = _holder_metrics(held, row.name, move.at) if move.from_ else None
    return [missing_evaluation(row), *metric_checks(row.body, {}, prev, move.from_)]
