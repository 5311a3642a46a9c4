"""the Hub's write side, proposals, contracts per team (issue 37)

Reserved in the migrations' chain for issue 37; it changes nothing until that issue's
tables land here.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07

"""

from collections.abc import Sequence

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
