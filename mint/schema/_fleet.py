"""What serves: the serving processes that report to the repository (or registry), what each
follows and serves now, the served history, and the count of failed stagings by reason."""

from __future__ import annotations

import sqlalchemy as sa

from mint.schema._base import HEX, METADATA, TS

# One row per serving process name (`mint serve --instance`, the vLLM plugin's MINT_INSTANCE).
# `seen_at` is the registry's time of its last report: live while within three `interval`s,
# then stale (kept and shown). `first_seen` is when the registry first heard of the process
# that started at `started_at`: no served interval starts before it. `stale_at` is `seen_at` plus
# three intervals, so that "live" is one comparison an index answers. `stopped_at`: the process
# said goodbye (a graceful stop), so it is neither live nor stale.
fleet_instances = sa.Table(
    "fleet_instances",
    METADATA,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("token", sa.String(200), nullable=False),  # who reported (a token's name)
    sa.Column("engine", sa.String(32), nullable=False),
    sa.Column("base", sa.String(64), nullable=True),  # the served base's fingerprint
    sa.Column("version", sa.String(64), nullable=True),  # mint's version in the process
    sa.Column("interval", sa.Float, nullable=False),  # seconds between its reports
    sa.Column("started_at", TS, nullable=False),  # by the process's clock
    sa.Column("first_seen", TS, nullable=False),
    sa.Column("seen_at", TS, nullable=False),
    sa.Column("stale_at", TS, nullable=False),  # seen_at + three intervals: stale after it
    sa.Column("stopped_at", TS, nullable=True),
    sa.Column("dropped", sa.Integer, nullable=False, server_default="0"),  # reports not sent
    sa.Index("ix_fleet_instances_token_stale_at", "token", "stale_at"),
)


# What each instance follows (LINE@REV, as given to it) and serves now: the commit, the canary
# split beside it, and its last failure to stage, with the one-line reason.
fleet_follows = sa.Table(
    "fleet_follows",
    METADATA,
    sa.Column("instance", sa.String(200), sa.ForeignKey("fleet_instances.name"), primary_key=True),
    sa.Column("name", sa.String(300), primary_key=True),
    sa.Column("line", sa.String(100), nullable=False),
    sa.Column("ref", sa.String(200), nullable=False),  # the part after '@' ('' for the head)
    sa.Column("commit", HEX, nullable=True),
    sa.Column("since", TS, nullable=True),
    sa.Column("canary", HEX, nullable=True),
    sa.Column("fraction", sa.Float, nullable=True),
    sa.Column("canary_since", TS, nullable=True),
    sa.Column("failed_commit", HEX, nullable=True),
    sa.Column("failed_at", TS, nullable=True),
    sa.Column("failure_kind", sa.String(64), nullable=True),
    sa.Column("failure", sa.String(500), nullable=True),
    sa.Index("ix_fleet_follows_line_ref", "line", "ref"),
)


# The served history, append-only: a row is written when an instance starts serving a commit
# for a name (as the holder's version, or as a canary's candidate beside it), and closed once,
# its `until` set, when it stops or when the instance was unseen (a gap follows). Rows of one
# (instance, name, canary) never overlap. An open row of a stale instance ends, as far as
# anyone knows, at the instance's `seen_at`.
fleet_served = sa.Table(
    "fleet_served",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("instance", sa.String(200), nullable=False),
    sa.Column("name", sa.String(300), nullable=False),
    sa.Column("line", sa.String(100), nullable=False),
    sa.Column("ref", sa.String(200), nullable=False),
    sa.Column("commit", HEX, nullable=False),
    sa.Column("canary", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("fraction", sa.Float, nullable=True),
    sa.Column("start", TS, nullable=False),
    sa.Column("until", TS, nullable=True),
    sa.Index("ix_fleet_served_line_ref_start", "line", "ref", "start"),
    sa.Index("ix_fleet_served_instance_name_canary_until", "instance", "name", "canary", "until"),
)


# Failed stagings reported by every instance, by reason (the error's class): the registry's
# /metrics counter, shared by its replicas.
fleet_failures = sa.Table(
    "fleet_failures",
    METADATA,
    sa.Column("kind", sa.String(64), primary_key=True),
    sa.Column("count", sa.BigInteger, nullable=False),
    sa.Column("last_at", TS, nullable=False),
)
