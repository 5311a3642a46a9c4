"""signatures that count only when they verify, key purposes, token revocation (issue 35)

Reserved in the migrations' chain for issue 35; it changes nothing until that issue's
tables land here.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07

"""

from collections.abc import Sequence

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
