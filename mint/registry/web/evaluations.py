"""The evaluations page: one contract's metrics over a line's evaluated commits.

`/evaluations/LINE@CONTRACT` (or `/evaluations/LINE`, the first contract evaluated on the
line) shows a table of the newest CAP evaluated commits with each metric as a column, and an
SVG chart of one metric (`?metric=NAME`, default the contract's first) over those commits in
order, with the contract's bounds as lines and the channel holders marked. Each commit counts
once, with its latest evaluation under any version of the contract. The same evaluations are
in the JSON API per commit (`GET /api/v1/evaluations?rev=`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import sqlalchemy as sa
from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from mint import api
from mint import schema as s
from mint.errors import RevisionNotFound
from mint.gates.evaluations import finite_metric, stored_metrics
from mint.ids import RefKind, iso
from mint.objects import Contract
from mint.refs.revisions import nearest
from mint.registry.auth import check_line
from mint.registry.web import chart
from mint.registry.web.pages import page
from mint.registry.web.queries import line_info
from mint.repo import Repo
from mint.team.tokens import Identity

CAP = 200  # evaluated commits on the page: the newest ones

router = APIRouter(include_in_schema=False)
Text = Annotated[str, Query(max_length=500)]


@dataclass(frozen=True)
class Evaluated:
    """A commit of the line and its latest evaluation under the contract."""

    commit: str
    message: str
    author: str
    created_at: str
    version: int  # the contract version it was evaluated under
    metrics: dict


def survey(repo: Repo, line: str) -> dict[str, dict[str, tuple]]:
    """Contract name -> {commit of LINE: (its time, its latest evaluation's id)}, for every
    contract a commit of LINE is evaluated under (any version). One pass over the line's
    commits, each joined to its evaluations by the index on (commit, contract, id)."""
    e, k = s.evaluations.c, s.commits.c
    q = (
        sa.select(k.id, k.created_at, e.id.label("eid"), e.contract_id)
        .select_from(s.commits.join(s.evaluations, e.commit_id == k.id))
        .where(k.line == line)
    )
    found: dict[str, dict[str, tuple]] = {}
    with repo.db.read() as conn:
        pairs = conn.execute(q).all()
        c = s.contracts.c
        names = dict(conn.execute(sa.select(c.id, c.name)).all())  # a few rows a contract
    for cid, at, eid, contract_id in pairs:
        commits = found.setdefault(names[contract_id], {})
        if cid not in commits or commits[cid][1] < eid:
            commits[cid] = (at, eid)
    return found


def newest(repo: Repo, commits: dict[str, tuple], cap: int = CAP) -> list[Evaluated]:
    """The newest CAP of COMMITS (as `survey` gives them for one contract), newest first,
    each with its evaluation."""
    order = sorted(commits.items(), key=lambda kv: (kv[1][0], kv[0]), reverse=True)[:cap]
    e, c, k = s.evaluations.c, s.contracts.c, s.commits.c
    q = (
        sa.select(
            e.id, k.id.label("commit"), k.message, k.author, k.created_at, c.version, e.metrics
        )
        .select_from(
            s.evaluations.join(s.commits, k.id == e.commit_id).join(
                s.contracts, c.id == e.contract_id
            )
        )
        .where(e.id.in_([eid for _, (_, eid) in order]))
    )
    with repo.db.read() as conn:
        rows = {r.id: r for r in conn.execute(q)} if order else {}
    return [_evaluated(rows[eid]) for _, (_, eid) in order]


def _evaluated(r) -> Evaluated:
    metrics = stored_metrics(r.metrics)
    return Evaluated(r.commit, r.message, r.author, iso(r.created_at), r.version, metrics)


def evaluated(repo: Repo, line: str, contract: str, cap: int = CAP) -> tuple[list, int]:
    """The newest CAP commits of LINE evaluated under CONTRACT (any version), newest first,
    each with its latest evaluation; and how many such commits there are."""
    commits = survey(repo, line).get(contract, {})
    return newest(repo, commits, cap), len(commits)


def split(ref: str) -> tuple[str, str | None]:
    """LINE@CONTRACT, or LINE alone (then the contract is chosen from the line's)."""
    line, at, contract = ref.partition("@")
    if not line or (at and not contract) or "@" in contract:
        raise RevisionNotFound(ref, "expected LINE@CONTRACT")
    return line, contract or None


def evaluations_page(repo: Repo, who: Identity, ref: str, metric: str | None) -> dict:
    """The context of `/evaluations/LINE[@CONTRACT]?metric=NAME`."""
    line, name = split(ref)
    check_line(who, line)
    if line_info(repo, line) is None:
        raise RevisionNotFound(line, "no such line")
    found = survey(repo, line)
    names = sorted(found)
    view = {"line": line, "contracts": names, "contract": None, "cap": CAP}
    if name is None and not names:
        return view  # nothing evaluated yet: the page says so
    contract = api.contract_show(repo, name or names[0])
    commits = found.get(contract.name, {})
    rows, total = newest(repo, commits), len(commits)
    metrics = _columns(contract, rows)
    metric = _chosen(contract, metrics, metric)
    bounds, held = _bounds(contract, metric), _holders(repo, line)
    shown = {r.commit for r in rows}
    return view | {
        "contract": contract,
        "rows": rows,
        "cells": {
            r.commit: [_cell(r.metrics.get(m), _bounds(contract, m)) for m in metrics]
            for r in rows
        },
        "total": total,
        "metrics": metrics,
        "metric": metric,
        "bounds": bounds,
        "held": held,
        "elsewhere": {c: chs for c, chs in held.items() if c not in shown},
        "chart": _chart(rows, metric, bounds, held) if metric else None,
    }


def _columns(contract: Contract, rows: list[Evaluated]) -> list[str]:
    """The contract's metrics in its order, then any other an older version recorded."""
    names = [m["name"] for m in contract.metrics]
    extra = sorted({k for r in rows for k in r.metrics} - set(names))
    return names + extra


def _chosen(contract: Contract, metrics: list[str], metric: str | None) -> str | None:
    if not metric:
        return metrics[0] if metrics else None
    if metric not in metrics:
        raise RevisionNotFound(
            metric, f"contract {contract.name} has no metric", nearest(metric, metrics)
        )
    return metric


def _bounds(contract: Contract, metric: str | None) -> dict[str, float]:
    """The contract's min and max for METRIC (max_regression is relative: not a line)."""
    for m in contract.metrics:
        if m["name"] == metric:
            return {k: m[k] for k in ("min", "max") if k in m}
    return {}


@dataclass(frozen=True)
class Cell:
    text: str
    outside: bool  # a number outside the contract's min or max


def _cell(value: object, bounds: dict[str, float]) -> Cell:
    number = finite_metric(value)
    if number is None:
        return Cell("-" if value is None else str(value), False)
    low, high = bounds.get("min"), bounds.get("max")
    outside = (low is not None and number < low) or (high is not None and number > high)
    return Cell(f"{number:.4g}", outside)


def _holders(repo: Repo, line: str) -> dict[str, list[str]]:
    """Commit -> the channels of LINE it holds."""
    held: dict[str, list[str]] = {}
    for ref in api.tag_list(repo, line, RefKind.CHANNEL):
        held.setdefault(ref.target, []).append(ref.name)
    return held


def _chart(rows: list[Evaluated], metric: str, bounds: dict, held: dict) -> chart.Chart:
    ordered = [r.commit for r in reversed(rows)]  # oldest first, left to right
    values = {r.commit: finite_metric(r.metrics.get(metric)) for r in rows}
    numbers = {c: v for c, v in values.items() if v is not None}
    return chart.layout(ordered, numbers, bounds, {c: held[c] for c in ordered if c in held})


@router.get("/evaluations/{ref:path}")
def evaluations(request: Request, ref: str, metric: Text | None = None) -> Response:
    repo = request.app.state.repo
    return page(request, "evaluations.html", lambda who: evaluations_page(repo, who, ref, metric))
