"""signed moves: a move's signature beside its history entry, and channels that need one

`mint promote/rollback --sign KEY` keeps a DSSE bundle of an in-toto statement of the move
beside its `ref_history` entry, in the move's transaction (`move_signatures`); `mint registry
protect CHANNEL --signed` makes every move of CHANNEL need one by a trusted key
(`protected_channels.signed`) (issue 23).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "move_signatures",
        sa.Column("entry", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("bundle", sa.Text(), nullable=False),
        sa.Column("key_hint", sa.String(length=64), nullable=True),
        sa.Column("added_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["entry"], ["ref_history.id"], name=op.f("fk_move_signatures_entry_ref_history")
        ),
        sa.PrimaryKeyConstraint("entry", name=op.f("pk_move_signatures")),
    )
    with op.batch_alter_table("protected_channels") as batch:
        batch.add_column(
            sa.Column("signed", sa.Boolean(), server_default=sa.false(), nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("protected_channels") as batch:
        batch.drop_column("signed")
    op.drop_table("move_signatures")
