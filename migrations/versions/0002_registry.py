"""the registry: tokens, protected channels, who pushed each commit and evaluation

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tokens",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("lines", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_tokens")),
        sa.UniqueConstraint("hash", name=op.f("uq_tokens_hash")),
    )
    op.create_table(
        "protected_channels",
        sa.Column("channel", sa.String(length=100), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.PrimaryKeyConstraint("channel", name=op.f("pk_protected_channels")),
    )
    for table in ("commits", "evaluations"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("pushed_by", sa.String(length=200), nullable=True))


def downgrade() -> None:
    for table in ("evaluations", "commits"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("pushed_by")
    op.drop_table("protected_channels")
    op.drop_table("tokens")
