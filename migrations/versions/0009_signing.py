"""signing: trusted public keys, and the model-signing bundles a commit carries

`mint key add NAME PUBLIC.pem` keeps a public key under a name (`signing_keys`); `mint commit
--sign KEY`, or a folder's `model.sig`, keeps an OpenSSF model-signing bundle beside the commit
(`commit_signatures`), which `mint verify` checks against the trusted keys (issue 23).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "signing_keys",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("public_pem", sa.Text(), nullable=False),
        sa.Column("added_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("added_by", sa.String(length=200), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_signing_keys")),
        sa.UniqueConstraint("fingerprint", name=op.f("uq_signing_keys_fingerprint")),
    )
    op.create_table(
        "commit_signatures",
        sa.Column("commit_id", sa.String(length=64), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("bundle", sa.Text(), nullable=False),
        sa.Column("key_hint", sa.String(length=64), nullable=True),
        sa.Column("added_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["commit_id"], ["commits.id"], name=op.f("fk_commit_signatures_commit_id_commits")
        ),
        sa.PrimaryKeyConstraint("commit_id", "sha256", name=op.f("pk_commit_signatures")),
    )


def downgrade() -> None:
    op.drop_table("commit_signatures")
    op.drop_table("signing_keys")
