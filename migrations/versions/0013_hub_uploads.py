"""contracts per team, proposals, what Hub uploads learnt (issue 37)

- contracts.scope: the sha256 of a contract's sorted line globs ('' for every line); a
  contract is its name within its scope, so its versions are numbered per (name, scope).
- proposals: commits offered to a line (refs/pr/N), merged or closed by a writer.
- hub_uploads: the header and tensor hashes an LFS upload read in the pass that stored a blob.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07

"""

import hashlib
import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _scope(lines) -> str:
    """As mint.gates.contracts.scope_of computes it (kept here: a migration never changes)."""
    if isinstance(lines, str):
        lines = json.loads(lines)
    if not lines:
        return ""
    globs = sorted(set(lines))
    text = json.dumps(globs, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def upgrade() -> None:
    with op.batch_alter_table("contracts") as batch:
        batch.add_column(
            sa.Column("scope", sa.String(length=64), server_default="", nullable=False)
        )
    conn = op.get_bind()
    rows = conn.execute(sa.text("SELECT id, lines FROM contracts")).all()
    for cid, lines in rows:
        scope = _scope(lines)
        if scope:
            conn.execute(
                sa.text("UPDATE contracts SET scope = :s WHERE id = :i"), {"s": scope, "i": cid}
            )
    with op.batch_alter_table("contracts") as batch:
        batch.drop_constraint("uq_contracts_name_version", type_="unique")
        batch.create_unique_constraint(
            "uq_contracts_name_scope_version", ["name", "scope", "version"]
        )
    op.create_table(
        "proposals",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("line", sa.String(length=100), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("commit_id", sa.String(length=64), nullable=False),
        sa.Column("base", sa.String(length=64), nullable=True),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("closed_by", sa.String(length=200), nullable=True),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("entry", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["commit_id"], ["commits.id"], name=op.f("fk_proposals_commit_id_commits")
        ),
        sa.ForeignKeyConstraint(
            ["entry"], ["ref_history.id"], name=op.f("fk_proposals_entry_ref_history")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_proposals")),
        sa.UniqueConstraint("line", "number", name=op.f("uq_proposals_line_number")),
    )
    with op.batch_alter_table("proposals") as batch:
        batch.create_index(batch.f("ix_proposals_commit_id"), ["commit_id"], unique=False)
    op.create_table(
        "hub_uploads",
        sa.Column("blob_id", sa.String(length=64), nullable=False),
        sa.Column("head", sa.LargeBinary(), nullable=False),
        sa.Column("tensors", sa.JSON(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("blob_id", name=op.f("pk_hub_uploads")),
    )


def downgrade() -> None:
    op.drop_table("hub_uploads")
    with op.batch_alter_table("proposals") as batch:
        batch.drop_index(batch.f("ix_proposals_commit_id"))
    op.drop_table("proposals")
    with op.batch_alter_table("contracts") as batch:
        batch.drop_constraint("uq_contracts_name_scope_version", type_="unique")
        batch.create_unique_constraint("uq_contracts_name_version", ["name", "version"])
        batch.drop_column("scope")
