"""The evidence a move rests on, as the channel page shows it: the evaluations the history row
names, with the table of their metric checks against the holder the move replaced, and the
approvals of the moved-to commit for the channel recorded up to the move.

Only the contract version and evaluation ids are stored beside a move (`mint.gates.promotion`);
the table is recomputed here from them with the gate's own `metric_checks`, comparing with
the replaced holder's latest evaluation recorded before the move."""

from __future__ import annotations

import sqlalchemy as sa

from mint import api
from mint import schema as s
from mint.gates.checks import metric_checks
from mint.ids import iso
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
        key = f"contract {e.contract} v{e.version}"
        if key not in cache:
            cache[key] = api.contract_show(repo, e.contract, e.version).metrics
        body = {"metrics": cache[key]}
        held = _evaluations(repo, move.from_, cache) if move.from_ else []
        prev = _holder_metrics(held, e.contract, move.at) if move.from_ else None
        out.append((e, metric_checks(body, e.metrics, prev, move.from_)))
    return out


def approvals_of(repo: Repo, move: Move) -> list[tuple[str, str]]:
    """(by, at) of each approval of MOVE's commit for its channel recorded up to the move,
    oldest first (none for a rollback, which no gate guards)."""
    if move.action not in ("promote", "force"):
        return []
    a = s.approvals.c
    q = (
        sa.select(a.by, a.at)
        .where(a.commit_id == move.to, a.channel == move.channel)
        .order_by(a.at, a.id)
    )
    with repo.db.read() as conn:
        found = [(r.by, iso(r.at)) for r in conn.execute(q)]
    return [(by, at) for by, at in found if at <= move.at]
