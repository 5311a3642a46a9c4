"""blob grants: proof that a line-limited token uploaded a blob's bytes

A push by a token limited to lines may name a stored blob only if a commit of its lines holds
it or the token uploaded it (a row here); gc deletes a blob's grants with the blob.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "blob_grants",
        sa.Column("token", sa.String(length=100), nullable=False),
        sa.Column("blob_id", sa.String(length=64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["token"], ["tokens.name"], name=op.f("fk_blob_grants_token_tokens")
        ),
        sa.PrimaryKeyConstraint("token", "blob_id", name=op.f("pk_blob_grants")),
    )
    op.create_index("ix_blob_grants_blob_id", "blob_grants", ["blob_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_blob_grants_blob_id", table_name="blob_grants")
    op.drop_table("blob_grants")
