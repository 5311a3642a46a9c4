"""learning from deployment: traces, feedback, dataset exports, canaries

Traces are written in batches off the request path; feedback points at a trace; a dataset is an
export of traces kept as a blob; a canary serves a candidate beside a channel's holder.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "traces",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("set_line", sa.String(length=100), nullable=False),
        sa.Column("set_commit", sa.String(length=64), nullable=False),
        sa.Column("variant", sa.String(length=100), nullable=False),
        sa.Column("label", sa.String(length=100), nullable=True),
        sa.Column("probs", sa.JSON(), nullable=True),
        sa.Column("expert_commit", sa.String(length=64), nullable=True),
        sa.Column("user", sa.String(length=200), nullable=True),
        sa.Column("messages", sa.JSON(), nullable=True),
        sa.Column("response", sa.Text(), nullable=True),
        sa.Column("latency", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_traces")),
    )
    op.create_index(op.f("ix_traces_at"), "traces", ["at"], unique=False)
    op.create_index(op.f("ix_traces_label"), "traces", ["label"], unique=False)
    op.create_index(op.f("ix_traces_set_commit"), "traces", ["set_commit"], unique=False)
    op.create_table(
        "feedback",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("trace_id", sa.String(length=64), nullable=False),
        sa.Column("score", sa.Float(), nullable=False),
        sa.Column("label", sa.String(length=100), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("by", sa.String(length=200), nullable=True),
        sa.ForeignKeyConstraint(
            ["trace_id"], ["traces.id"], name=op.f("fk_feedback_trace_id_traces")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_feedback")),
    )
    op.create_index(op.f("ix_feedback_trace_id"), "feedback", ["trace_id"], unique=False)
    op.create_table(
        "datasets",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("format", sa.String(length=16), nullable=False),
        sa.Column("records", sa.Integer(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("filters", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_datasets")),
    )
    op.create_table(
        "canaries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("line", sa.String(length=100), nullable=False),
        sa.Column("channel", sa.String(length=100), nullable=False),
        sa.Column("candidate", sa.String(length=64), nullable=False),
        sa.Column("baseline", sa.String(length=64), nullable=False),
        sa.Column("fraction", sa.Float(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_by", sa.String(length=200), nullable=False),
        sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("stopped_by", sa.String(length=200), nullable=True),
        sa.Column("outcome", sa.String(length=16), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["baseline"], ["commits.id"], name=op.f("fk_canaries_baseline_commits")
        ),
        sa.ForeignKeyConstraint(
            ["candidate"], ["commits.id"], name=op.f("fk_canaries_candidate_commits")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_canaries")),
    )
    op.create_index(
        "ix_canaries_line_channel_stopped_at",
        "canaries",
        ["line", "channel", "stopped_at"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_canaries_line_channel_stopped_at", table_name="canaries")
    op.drop_table("canaries")
    op.drop_table("datasets")
    op.drop_index(op.f("ix_feedback_trace_id"), table_name="feedback")
    op.drop_table("feedback")
    op.drop_index(op.f("ix_traces_set_commit"), table_name="traces")
    op.drop_index(op.f("ix_traces_label"), table_name="traces")
    op.drop_index(op.f("ix_traces_at"), table_name="traces")
    op.drop_table("traces")
