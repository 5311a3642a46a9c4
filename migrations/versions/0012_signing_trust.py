"""key purposes, and the keys a signed channel takes (issue 35)

A trusted key can be limited to what it may sign: `signing_keys.purposes` (among commits,
sets and moves), `lines` (line globs) and `channels` (channel names), each null for no limit,
as every key added before this revision is. `mint registry protect CHANNEL --signed --keys
NAMES` names the keys a signed channel's moves take (`protected_channels.signed_by`; null: any
trusted key that may sign moves). Signatures that count only when they verify, and tokens
revoked at once on every replica, need no table.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("signing_keys") as batch:
        batch.add_column(sa.Column("purposes", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("lines", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("channels", sa.JSON(), nullable=True))
    with op.batch_alter_table("protected_channels") as batch:
        batch.add_column(sa.Column("signed_by", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("protected_channels") as batch:
        batch.drop_column("signed_by")
    with op.batch_alter_table("signing_keys") as batch:
        batch.drop_column("channels")
        batch.drop_column("lines")
        batch.drop_column("purposes")
