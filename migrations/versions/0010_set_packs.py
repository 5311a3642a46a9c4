"""set packs: a set commit's members' tensors in one content-addressed blob

The runtime stages a set from one read of its pack (`mint.sets.pack`), built at the set's first
stage; `set_packs` names the pack blob of each set commit, and gc keeps a pack while a ref names
its set (issue 24).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "set_packs",
        sa.Column("set_id", sa.String(length=64), nullable=False),
        sa.Column("pack_id", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("built_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["set_id"], ["commits.id"], name=op.f("fk_set_packs_set_id_commits")
        ),
        sa.PrimaryKeyConstraint("set_id", name=op.f("pk_set_packs")),
    )
    op.create_index(op.f("ix_set_packs_pack_id"), "set_packs", ["pack_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_set_packs_pack_id"), table_name="set_packs")
    op.drop_table("set_packs")
