"""harness evidence and merges (issue 39)

Reserved in the migrations' chain for issue 39; it changes nothing until that issue's
tables land here.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07

"""

from collections.abc import Sequence

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
