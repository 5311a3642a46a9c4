"""what serves: instances and served history (issue 38)

Reserved in the migrations' chain for issue 38; it changes nothing until that issue's
tables land here.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07

"""

from collections.abc import Sequence

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
