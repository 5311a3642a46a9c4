"""The search index's rows (`commit_meta`, `evaluation_metrics`; see mint.search), written
in the transaction that stores each commit (`rows.insert_commit`) and each evaluation
(`gates.evaluations.insert_evaluation`), the one insert of each, whatever door it came by;
migration 0008 fills them from the rows stored before it with the same functions."""

from __future__ import annotations

import json
import math

from sqlalchemy.engine import Connection

from mint import schema as s

META_KEY_MAX = 200  # the columns' widths: a longer key or value is not searchable
META_VALUE_MAX = 500
METRIC_NAME_MAX = 200


def meta_text(value: object) -> str:
    """How a meta value is matched: a string as it is, anything else as its JSON."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def meta_rows(meta: object) -> list[dict]:
    """{key, value} for each searchable entry of a commit's META."""
    if not isinstance(meta, dict):
        return []
    found = ((str(k), meta_text(v)) for k, v in meta.items())
    return [
        {"key": k, "value": v}
        for k, v in found
        if 0 < len(k) <= META_KEY_MAX and len(v) <= META_VALUE_MAX
    ]


def metric_rows(metrics: object) -> list[dict]:
    """{name, value} for each finite number among an evaluation's METRICS."""
    if not isinstance(metrics, dict):
        return []
    return [
        {"name": str(k), "value": float(v)}
        for k, v in metrics.items()
        if isinstance(v, int | float)
        and not isinstance(v, bool)
        and math.isfinite(v)
        and 0 < len(str(k)) <= METRIC_NAME_MAX
    ]


def index_commit(conn: Connection, commit_id: str, meta: object) -> None:
    """The search rows of a commit, in the transaction that inserts it."""
    rows = [r | {"commit_id": commit_id} for r in meta_rows(meta)]
    if rows:
        conn.execute(s.commit_meta.insert(), rows)


def index_evaluation(conn: Connection, evaluation_id: int, commit_id: str, metrics) -> None:
    """The search rows of an evaluation, in the transaction that inserts it."""
    rows = [
        r | {"evaluation_id": evaluation_id, "commit_id": commit_id} for r in metric_rows(metrics)
    ]
    if rows:
        conn.execute(s.evaluation_metrics.insert(), rows)
