"""what serves: the serving processes that report, what each serves, and the served history

Serving processes (`mint serve`, either engine; vLLM's mint plugin) report to the repository or
registry what they follow and serve (`fleet_instances`, `fleet_follows`); the registry keeps an
append-only served history (`fleet_served`) and counts failed stagings by reason
(`fleet_failures`) (issue 38).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "fleet_instances",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("token", sa.String(length=200), nullable=False),
        sa.Column("engine", sa.String(length=32), nullable=False),
        sa.Column("base", sa.String(length=64), nullable=True),
        sa.Column("version", sa.String(length=64), nullable=True),
        sa.Column("interval", sa.Float(), nullable=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("first_seen", TS, nullable=False),
        sa.Column("seen_at", TS, nullable=False),
        sa.Column("stale_at", TS, nullable=False),
        sa.Column("stopped_at", TS, nullable=True),
        sa.Column("dropped", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_fleet_instances")),
    )
    op.create_index(
        op.f("ix_fleet_instances_token_stale_at"), "fleet_instances", ["token", "stale_at"]
    )
    op.create_table(
        "fleet_follows",
        sa.Column("instance", sa.String(length=200), nullable=False),
        sa.Column("name", sa.String(length=300), nullable=False),
        sa.Column("line", sa.String(length=100), nullable=False),
        sa.Column("ref", sa.String(length=200), nullable=False),
        sa.Column("commit", sa.String(length=64), nullable=True),
        sa.Column("since", TS, nullable=True),
        sa.Column("canary", sa.String(length=64), nullable=True),
        sa.Column("fraction", sa.Float(), nullable=True),
        sa.Column("canary_since", TS, nullable=True),
        sa.Column("failed_commit", sa.String(length=64), nullable=True),
        sa.Column("failed_at", TS, nullable=True),
        sa.Column("failure_kind", sa.String(length=64), nullable=True),
        sa.Column("failure", sa.String(length=500), nullable=True),
        sa.ForeignKeyConstraint(
            ["instance"],
            ["fleet_instances.name"],
            name=op.f("fk_fleet_follows_instance_fleet_instances"),
        ),
        sa.PrimaryKeyConstraint("instance", "name", name=op.f("pk_fleet_follows")),
    )
    op.create_index(op.f("ix_fleet_follows_line_ref"), "fleet_follows", ["line", "ref"])
    op.create_table(
        "fleet_served",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("instance", sa.String(length=200), nullable=False),
        sa.Column("name", sa.String(length=300), nullable=False),
        sa.Column("line", sa.String(length=100), nullable=False),
        sa.Column("ref", sa.String(length=200), nullable=False),
        sa.Column("commit", sa.String(length=64), nullable=False),
        sa.Column("canary", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("fraction", sa.Float(), nullable=True),
        sa.Column("start", TS, nullable=False),
        sa.Column("until", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fleet_served")),
    )
    op.create_index(
        op.f("ix_fleet_served_line_ref_start"), "fleet_served", ["line", "ref", "start"]
    )
    op.create_index(
        op.f("ix_fleet_served_instance_name_canary_until"),
        "fleet_served",
        ["instance", "name", "canary", "until"],
    )
    op.create_table(
        "fleet_failures",
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("last_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("kind", name=op.f("pk_fleet_failures")),
    )


def downgrade() -> None:
    op.drop_table("fleet_failures")
    op.drop_index(op.f("ix_fleet_served_instance_name_canary_until"), table_name="fleet_served")
    op.drop_index(op.f("ix_fleet_served_line_ref_start"), table_name="fleet_served")
    op.drop_table("fleet_served")
    op.drop_index(op.f("ix_fleet_follows_line_ref"), table_name="fleet_follows")
    op.drop_table("fleet_follows")
    op.drop_index(op.f("ix_fleet_instances_token_stale_at"), table_name="fleet_instances")
    op.drop_table("fleet_instances")
