"""the catalog at a million: channels by kind, in one index range

`status` lists every channel (refs of kind `channel`): without this index that is a scan of
every ref, tags included (10^5 of them at 10^6 commits). The index holds the target too, so
the query never reads the table.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02

"""

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_refs_kind_line_name_target", "refs", ["kind", "line", "name", "target"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_refs_kind_line_name_target", table_name="refs")
