"""Evaluations: append-only results of a commit under a contract version."""

from __future__ import annotations

import math

import sqlalchemy as sa

from mint import schema as s
from mint.commits import rows
from mint.commits.indexes import index_evaluation
from mint.errors import EvaluationFailed, InvalidObject
from mint.exchange.received import json_value, shown
from mint.gates.contracts import contract_row, get_row
from mint.ids import HARNESS_SOURCES, ContractId, EvalSource, iso, utcnow
from mint.objects import Evaluation
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
        row = get_row(conn, contract, line=rows.commit_row(conn, cid).line)
        values = evaluation_values(
            row.body, metrics, source=source, evaluator=evaluator, data_hash=data_hash, by=by
        )
        eid = insert_evaluation(conn, commit_id=cid, contract_id=row.id, at=utcnow(), **values)
        return evaluation(conn, eid)


def insert_evaluation(conn, **row) -> int:
    """The one insert of an evaluation's row (`record`, and one arriving by push or fetch),
    with its search rows (mint.search); returns its id."""
    eid = conn.execute(s.evaluations.insert().values(**row)).inserted_primary_key[0]
    index_evaluation(conn, eid, row["commit_id"], row["metrics"])
    return eid


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
    harness = isinstance(source, str) and source in HARNESS_SOURCES
    values = check_metrics(body, metrics, every=harness)
    if not isinstance(source, str) or source not in {str(x) for x in EvalSource}:
        known = ", ".join(str(x) for x in EvalSource)
        raise EvaluationFailed(f"unknown evaluation source {shown(source)} (known: {known})")
    if evaluator is not None and not isinstance(evaluator, dict):
        raise EvaluationFailed(f"evaluator is {shown(evaluator)}: a table or nothing")
    if harness and not (isinstance(evaluator, dict) and isinstance(evaluator.get("version"), str)):
        raise EvaluationFailed(f"an evaluation from {source} keeps the harness's version")
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


def check_metrics(body: dict, metrics: dict, every: bool = False) -> dict:
    """Every contract metric must be present and numeric; no key outside the contract, unless
    EVERY: a harness's results keep every score it wrote (mint.gates.harness), each a number."""
    names = [m["name"] for m in body["metrics"]]
    unknown = sorted(set(metrics) - set(names))
    if unknown and not every:
        raise EvaluationFailed(
            f"unknown metric key {shown(unknown[0])}: contract {body['name']} has "
            f"{', '.join(names)}"
        )
    missing = [n for n in names if n not in metrics]
    if missing:
        has = f" (it has {', '.join(sorted(metrics)[:6])}{', ...' if len(metrics) > 6 else ''})"
        raise EvaluationFailed(
            f"missing metric {missing[0]!r} for contract {body['name']}" + (has if every else "")
        )
    out = {}
    for k, v in metrics.items():
        value = metric_number(v)
        if value is None:
            raise EvaluationFailed(f"metric {shown(k)} is not a number: {shown(v)}")
        if not math.isfinite(value):
            raise EvaluationFailed(f"metric {shown(k)} is {shown(v)}: metrics must be finite")
        out[k] = value
    return out


def metric_number(value: object) -> float | None:
    """VALUE as `mint eval` reads a metric (an int, a float or a numeric string; never a
    bool), or None; it may be infinite or NaN, which `check_metrics` refuses."""
    if not isinstance(value, (int, float, str)) or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (ValueError, OverflowError):
        return None


def finite_metric(value: object) -> float | None:
    """VALUE as a number a gate can compare, or None: what `check_metrics` accepts."""
    number = metric_number(value)
    return number if number is not None and math.isfinite(number) else None


# --- reading stored rows ----------------------------------------------------------
# Rows stored before every door checked evaluations (an older registry took them by push
# unchecked) can hold anything. `mint fsck` names them (`evaluation_values`); reading them
# must not fail, or their commit could never be shown, gated or promoted again.


def stored_metrics(raw: object) -> dict:
    """A stored row's metrics as they are read: each value a finite float where it is one,
    else kept for display (a string, null or bool as it is; anything that JSON or a page
    could not show, such as NaN, a list or a huge integer, as its short repr). A gate finds
    no number in those (`finite_metric`). Not a table at all: no metrics. Idempotent."""
    if not isinstance(raw, dict):
        return {}
    return {str(k): _stored_value(v) for k, v in raw.items()}


def _stored_value(value: object) -> object:
    number = finite_metric(value)
    if number is not None:
        return number
    return value if value is None or isinstance(value, (str, bool)) else shown(value)


def stored_source(raw: object) -> EvalSource | str:
    """A stored row's source: one of `EvalSource`, or an unknown one as its text."""
    try:
        return EvalSource(raw)
    except ValueError:
        return str(raw)


def evaluation(conn, eid: int) -> Evaluation:
    r = conn.execute(sa.select(s.evaluations).where(s.evaluations.c.id == eid)).one()
    c = contract_row(conn, r.contract_id)
    return Evaluation(
        r.id,
        r.commit_id,
        ContractId(r.contract_id),
        c.name,
        c.version,
        stored_metrics(r.metrics),
        stored_source(r.source),
        r.evaluator if isinstance(r.evaluator, dict) else None,  # fsck names any other
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


def latest_evaluation_any_version(conn, commit_id: str, name: str, scope: str = ""):
    """The latest evaluation of COMMIT_ID under any version of contract NAME in SCOPE."""
    c = s.contracts.c
    q = (
        sa.select(s.evaluations)
        .join(s.contracts, c.id == s.evaluations.c.contract_id)
        .where(s.evaluations.c.commit_id == commit_id, c.name == name, c.scope == scope)
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
