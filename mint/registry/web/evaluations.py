"""The evaluations page: one contract's metrics over a line's evaluated commits.

`/evaluations/LINE@CONTRACT` (or `/evaluations/LINE`: a contract the line's head is
evaluated under, else one a commit of the line is) shows a table of the newest CAP evaluated
commits with each metric as a column, and an SVG chart of one metric (`?metric=NAME`, default
the contract's first) over those commits in order, with the contract's bounds as lines and
the channel holders marked. Each commit counts once, with its latest evaluation under any
version of the contract. The same evaluations are in the JSON API per commit
(`GET /api/v1/evaluations?rev=`).
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
from mint.gates.checks import number_text
from mint.gates.contracts import covers
from mint.gates.evaluations import finite_metric, stored_metrics
from mint.ids import RefKind, iso
from mint.objects import Contract
from mint.refs.revisions import nearest
from mint.registry.auth import check_line
from mint.registry.web import chart
from mint.registry.web.pages import page
from mint.registry.web.queries import badges, line_info
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


def _evaluated_on(line: str):
    """The line's commits joined to their evaluations (by the index on commit, contract, id)."""
    e, k = s.evaluations.c, s.commits.c
    return s.commits.join(s.evaluations, e.commit_id == k.id), k.line == line


def contracts_on(repo: Repo, line: str) -> list[str]:
    """The names of the contracts some commit of LINE is evaluated under (any version)."""
    joined, where = _evaluated_on(line)
    ids = sa.select(s.evaluations.c.contract_id).select_from(joined).where(where).distinct()
    c = s.contracts.c
    q = sa.select(c.name).where(c.id.in_(ids)).distinct().order_by(c.name)
    with repo.db.read() as conn:
        return list(conn.execute(q).scalars())


def evaluated(repo: Repo, line: str, contract: str, cap: int = CAP) -> tuple[list, int]:
    """The newest CAP commits of LINE evaluated under CONTRACT (any version), newest first,
    each with its latest evaluation; and how many such commits there are. The database
    groups, orders and counts: one pass over the line's evaluated commits, then a read of
    the CAP shown."""
    e, c, k = s.evaluations.c, s.contracts.c, s.commits.c
    joined, where = _evaluated_on(line)
    versions = sa.select(c.id).where(c.name == contract)
    q = (
        sa.select(sa.func.max(e.id), sa.func.count().over())
        .select_from(joined)
        .where(where, e.contract_id.in_(versions))
        .group_by(k.id, k.created_at)
        .order_by(k.created_at.desc(), k.id.desc())
        .limit(cap)
    )
    with repo.db.read() as conn:
        found = conn.execute(q).all()
        rows = _rows(conn, [eid for eid, _ in found])
    return rows, found[0][1] if found else 0


def _rows(conn, ids: list[int]) -> list[Evaluated]:
    """The evaluations IDS with their commits, in that order."""
    if not ids:
        return []
    e, c, k = s.evaluations.c, s.contracts.c, s.commits.c
    q = (
        sa.select(e.id, k.id.label("commit"), k.message, k.author, k.created_at, c.version)
        .add_columns(e.metrics)
        .select_from(
            s.evaluations.join(s.commits, k.id == e.commit_id).join(
                s.contracts, c.id == e.contract_id
            )
        )
        .where(e.id.in_(ids))
    )
    rows = {r.id: r for r in conn.execute(q)}
    return [_evaluated(rows[i]) for i in ids]


def _evaluated(r) -> Evaluated:
    metrics = stored_metrics(r.metrics)
    return Evaluated(r.commit, r.message, r.author, iso(r.created_at), r.version, metrics)


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
    info = line_info(repo, line)
    if info is None:
        raise RevisionNotFound(line, "no such line")
    if name is None:
        name = _default_contract(repo, line, info.head)
    names = [c.name for c in api.contract_ls(repo) if covers(c.lines, line)]
    view = {"line": line, "contracts": names, "contract": None, "cap": CAP}
    if name is None:
        return view  # nothing evaluated yet: the page says so
    contract = api.contract_show(repo, name, line=line)
    rows, total = evaluated(repo, line, contract.name)
    metrics = _columns(contract, rows)
    metric = _chosen(contract, metrics, metric)
    bounds, held = _bounds(contract, metric), _holders(repo, line)
    shown = {r.commit for r in rows}
    tags, _ = badges(repo, line, list(shown))  # by the index on targets: the page's rows
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
        "tags": tags,
        "elsewhere": {c: chs for c, chs in held.items() if c not in shown},
        "chart": _chart(rows, metric, bounds, held, tags) if metric else None,
    }


def _default_contract(repo: Repo, line: str, head: str | None) -> str | None:
    """The first contract (by name) the line's head is evaluated under (one lookup by the
    index), else the first any commit of the line is (a pass over the line); None: none."""
    at_head = sorted({e.contract for e in api.evaluations_of(repo, head)}) if head else []
    return next(iter(at_head or contracts_on(repo, line)), None)


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
    return Cell(number_text(number), outside)


def _holders(repo: Repo, line: str) -> dict[str, list[str]]:
    """Commit -> the channels of LINE it holds."""
    held: dict[str, list[str]] = {}
    for ref in api.tag_list(repo, line, RefKind.CHANNEL):
        held.setdefault(ref.target, []).append(ref.name)
    return held


def _chart(
    rows: list[Evaluated], metric: str, bounds: dict, held: dict, tags: dict
) -> chart.Chart:
    ordered = [r.commit for r in reversed(rows)]  # oldest first, left to right
    values = {r.commit: finite_metric(r.metrics.get(metric)) for r in rows}
    numbers = {c: v for c, v in values.items() if v is not None}
    holders = {c: held[c] for c in ordered if c in held}
    return chart.layout(ordered, numbers, bounds, holders, tags)


@router.get("/evaluations/{ref:path}")
def evaluations(request: Request, ref: str, metric: Text | None = None) -> Response:
    repo = request.app.state.repo
    return page(request, "evaluations.html", lambda who: evaluations_page(repo, who, ref, metric))
