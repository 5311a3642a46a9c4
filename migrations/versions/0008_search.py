"""search: commits by meta, metric, tag and author, each in one index range

`commit_meta` holds each commit's meta as (key, value) rows and `evaluation_metrics` each
evaluation's numeric metrics as (name, value) rows, both written with their commit or
evaluation from now on (mint.commits.indexes) and filled here from the rows already stored.
Two more indexes: commits by author, newest first, and tags by name on any line.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from mint.commits.indexes import meta_rows, metric_rows

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BATCH = 5000


def upgrade() -> None:
    commit_meta = op.create_table(
        "commit_meta",
        sa.Column("commit_id", sa.String(length=64), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("value", sa.String(length=500), nullable=False),
        sa.ForeignKeyConstraint(
            ["commit_id"], ["commits.id"], name=op.f("fk_commit_meta_commit_id_commits")
        ),
        sa.PrimaryKeyConstraint("commit_id", "key", name=op.f("pk_commit_meta")),
    )
    evaluation_metrics = op.create_table(
        "evaluation_metrics",
        sa.Column("evaluation_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("commit_id", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["commit_id"], ["commits.id"], name=op.f("fk_evaluation_metrics_commit_id_commits")
        ),
        sa.ForeignKeyConstraint(
            ["evaluation_id"],
            ["evaluations.id"],
            name=op.f("fk_evaluation_metrics_evaluation_id_evaluations"),
        ),
        sa.PrimaryKeyConstraint("evaluation_id", "name", name=op.f("pk_evaluation_metrics")),
    )
    _backfill(commit_meta, evaluation_metrics)
    op.create_index(
        "ix_commit_meta_key_value_commit_id", "commit_meta", ["key", "value", "commit_id"]
    )
    op.create_index(
        "ix_evaluation_metrics_name_value_commit_id",
        "evaluation_metrics",
        ["name", "value", "commit_id"],
    )
    op.create_index(
        "ix_evaluation_metrics_commit_id_name_value",
        "evaluation_metrics",
        ["commit_id", "name", "value"],
    )
    op.create_index("ix_commits_author_created_at", "commits", ["author", "created_at"])
    op.create_index("ix_refs_name_kind_target", "refs", ["name", "kind", "target"])


def _backfill(commit_meta: sa.Table, evaluation_metrics: sa.Table) -> None:
    """The rows of every commit and evaluation already stored, as mint.commits.indexes
    writes them."""
    conn = op.get_bind()
    meta = sa.table("commits", sa.column("id"), sa.column("meta", sa.JSON))
    found = conn.execute(sa.select(meta.c.id, meta.c.meta)).all()
    _insert(conn, commit_meta, [r | {"commit_id": cid} for cid, m in found for r in meta_rows(m)])
    ev = sa.table(
        "evaluations", sa.column("id"), sa.column("commit_id"), sa.column("metrics", sa.JSON)
    )
    found = conn.execute(sa.select(ev.c.id, ev.c.commit_id, ev.c.metrics)).all()
    rows = [
        r | {"evaluation_id": eid, "commit_id": cid}
        for eid, cid, metrics in found
        for r in metric_rows(metrics)
    ]
    _insert(conn, evaluation_metrics, rows)


def _insert(conn, table: sa.Table, rows: list[dict]) -> None:
    for i in range(0, len(rows), _BATCH):
        conn.execute(table.insert(), rows[i : i + _BATCH])


def downgrade() -> None:
    op.drop_index("ix_refs_name_kind_target", table_name="refs")
    op.drop_index("ix_commits_author_created_at", table_name="commits")
    for name in (
        "ix_evaluation_metrics_commit_id_name_value",
        "ix_evaluation_metrics_name_value_commit_id",
    ):
        op.drop_index(name, table_name="evaluation_metrics")
    op.drop_index("ix_commit_meta_key_value_commit_id", table_name="commit_meta")
    op.drop_table("evaluation_metrics")
    op.drop_table("commit_meta")
