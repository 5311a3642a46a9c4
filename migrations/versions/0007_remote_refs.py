"""remote refs: a remote's channels and tags as of the last fetch or clone, read-only

`mint fetch` and `mint clone` keep each fetched line's channels and tags as REMOTE/NAME
(`chat@origin/production`); a line's later fetch replaces them (pruning those gone).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "remote_refs",
        sa.Column("remote", sa.String(length=100), nullable=False),
        sa.Column("line", sa.String(length=100), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("target", sa.String(length=64), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["target"], ["commits.id"], name=op.f("fk_remote_refs_target_commits")
        ),
        sa.PrimaryKeyConstraint("remote", "line", "name", name=op.f("pk_remote_refs")),
    )
    op.create_index(op.f("ix_remote_refs_target"), "remote_refs", ["target"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_remote_refs_target"), table_name="remote_refs")
    op.drop_table("remote_refs")
