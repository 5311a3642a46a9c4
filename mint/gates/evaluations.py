"""Evaluations: append-only results of a commit under a contract version."""

from __future__ import annotations

import math

import sqlalchemy as sa

from mint import schema as s
from mint.errors import EvaluationFailed, InvalidObject
from mint.gates.contracts import contract_row, get_row
from mint.ids import ContractId, EvalSource, iso, utcnow
from mint.objects import Evaluation
from mint.received import json_value, shown
from mint.refs import resolve
from mint.repo import Repo

MAX_BY = 200  # the column's width


def record(
    repo: Repo,
    rev: str,
    contract: str,
    metrics: dict,
    *,
    source: str,
    evaluator: dict | None = None,
    data_hash: str | None = None,
    by: str,
) -> Evaluation:
    """Record an evaluation of REV under the current version of CONTRACT."""
    with repo.db.write() as conn:
        cid = resolve(conn, rev).id
        row = get_row(conn, contract)
        values = evaluation_values(
            row.body, metrics, source=source, evaluator=evaluator, data_hash=data_hash, by=by
        )
        eid = conn.execute(
            s.evaluations.insert().values(commit_id=cid, contract_id=row.id, at=utcnow(), **values)
        ).inserted_primary_key[0]
        return evaluation(conn, eid)


def evaluation_values(
    body: dict,
    metrics: object,
    *,
    source: object,
    evaluator: object,
    data_hash: object,
    by: object,
) -> dict:
    """The checked columns of an evaluation under the contract BODY (metrics, source,
    evaluator, data_hash, by). `mint eval`, the registry's route and an evaluation arriving
    by push or fetch all pass here: one check, wherever an evaluation comes from."""
    if not isinstance(metrics, dict):
        raise EvaluationFailed(f"metrics are {shown(metrics)}: a table of name = number")
    values = check_metrics(body, metrics)
    if not isinstance(source, str) or source not in {str(x) for x in EvalSource}:
        known = ", ".join(str(x) for x in EvalSource)
        raise EvaluationFailed(f"unknown evaluation source {shown(source)} (known: {known})")
    if evaluator is not None and not isinstance(evaluator, dict):
        raise EvaluationFailed(f"evaluator is {shown(evaluator)}: a table or nothing")
    if data_hash is not None and not (isinstance(data_hash, str) and 0 < len(data_hash) <= 64):
        raise EvaluationFailed(f"data hash is {shown(data_hash)}: a string of 1 to 64 characters")
    if not (isinstance(by, str) and by.strip() and len(by) <= MAX_BY):
        raise EvaluationFailed(
            f"evaluated by {shown(by)}: an identity of 1 to {MAX_BY} characters"
        )
    try:
        json_value(evaluator, "evaluator")
    except InvalidObject as exc:
        raise EvaluationFailed(str(exc)) from None
    return dict(
        metrics=values, source=str(source), evaluator=evaluator, data_hash=data_hash, by=by
    )


def check_metrics(body: dict, metrics: dict) -> dict:
    """Every contract metric must be present and numeric; no key outside the contract."""
    names = [m["name"] for m in body["metrics"]]
    unknown = sorted(set(metrics) - set(names))
    if unknown:
        raise EvaluationFailed(
            f"unknown metric key {shown(unknown[0])}: contract {body['name']} has "
            f"{', '.join(names)}"
        )
    missing = [n for n in names if n not in metrics]
    if missing:
        raise EvaluationFailed(f"missing metric {missing[0]!r} for contract {body['name']}")
    out = {}
    for k, v in metrics.items():
        try:
            value = (
                float(v) if isinstance(v, (int, float, str)) and not isinstance(v, bool) else None
            )
        except (ValueError, OverflowError):
            value = None
        if value is None:
            raise EvaluationFailed(f"metric {shown(k)} is not a number: {shown(v)}")
        if not math.isfinite(value):
            raise EvaluationFailed(f"metric {shown(k)} is {shown(v)}: metrics must be finite")
        out[k] = value
    return out


def evaluation(conn, eid: int) -> Evaluation:
    r = conn.execute(sa.select(s.evaluations).where(s.evaluations.c.id == eid)).one()
    c = contract_row(conn, r.contract_id)
    return Evaluation(
        r.id,
        r.commit_id,
        ContractId(r.contract_id),
        c.name,
        c.version,
        r.metrics,
        EvalSource(r.source),
        r.evaluator,
        r.data_hash,
        r.by,
        iso(r.at),
        pushed_by=r.pushed_by,
    )


def latest_evaluation(conn, commit_id: str, contract_id: str):
    q = sa.select(s.evaluations).where(
        s.evaluations.c.commit_id == commit_id, s.evaluations.c.contract_id == contract_id
    )
    return conn.execute(q.order_by(s.evaluations.c.id.desc()).limit(1)).first()


def latest_evaluation_any_version(conn, commit_id: str, name: str):
    q = (
        sa.select(s.evaluations)
        .join(s.contracts, s.contracts.c.id == s.evaluations.c.contract_id)
        .where(s.evaluations.c.commit_id == commit_id, s.contracts.c.name == name)
    )
    return conn.execute(
        q.order_by(s.contracts.c.version.desc(), s.evaluations.c.id.desc()).limit(1)
    ).first()


def evaluations_of(repo: Repo, rev: str) -> list[Evaluation]:
    """Every evaluation recorded for the commit REV names, oldest first."""
    with repo.db.read() as conn:
        cid = resolve(conn, rev).id
        e = s.evaluations.c
        ids = conn.execute(sa.select(e.id).where(e.commit_id == cid).order_by(e.id)).scalars()
        return [evaluation(conn, i) for i in ids]
