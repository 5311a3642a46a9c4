"""Learning from deployment: traces, feedback, datasets, canaries."""

from __future__ import annotations

import sqlalchemy as sa

from mint.schema import _commits  # noqa: F401  (the tables its foreign keys name)
from mint.schema._base import HEX, METADATA, TS

# One row per served turn. `id` is the completion id the server returned.
traces = sa.Table(
    "traces",
    METADATA,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("at", TS, nullable=False, index=True),
    sa.Column("set_line", sa.String(100), nullable=False),
    sa.Column("set_commit", HEX, nullable=False, index=True),
    sa.Column("variant", sa.String(100), nullable=False),  # production | canary (or the rev)
    sa.Column("label", sa.String(100), nullable=True, index=True),  # the routed expert
    sa.Column("probs", sa.JSON, nullable=True),  # label -> router probability
    sa.Column("expert_commit", HEX, nullable=True),
    sa.Column("user", sa.String(200), nullable=True),
    sa.Column("messages", sa.JSON, nullable=True),  # null when content capture is off
    sa.Column("response", sa.Text, nullable=True),
    sa.Column("latency", sa.JSON, nullable=False),  # stage -> seconds
)


# Feedback on a turn: a score in [0, 1] and, optionally, the expert that should have answered.
feedback = sa.Table(
    "feedback",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("trace_id", sa.String(64), sa.ForeignKey("traces.id"), nullable=False, index=True),
    sa.Column("score", sa.Float, nullable=False),
    sa.Column("label", sa.String(100), nullable=True),
    sa.Column("at", TS, nullable=False),
    sa.Column("by", sa.String(200), nullable=True),
)


# An export of traces, kept as a blob: `id` is its sha256 (the blob id), so a commit's
# `--meta data=<id>` names exactly the bytes it was trained on.
datasets = sa.Table(
    "datasets",
    METADATA,
    sa.Column("id", HEX, primary_key=True),
    sa.Column("format", sa.String(16), nullable=False),  # chat | router
    sa.Column("records", sa.Integer, nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("filters", sa.JSON, nullable=False),
    sa.Column("created_at", TS, nullable=False),
    sa.Column("created_by", sa.String(200), nullable=False),
)


# Canaries: a candidate set served to a fraction of a channel's requests. At most one is
# open (stopped_at null) per line and channel; starts and stops are also ref_history rows.
canaries = sa.Table(
    "canaries",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("line", sa.String(100), nullable=False),
    sa.Column("channel", sa.String(100), nullable=False),
    sa.Column("candidate", HEX, sa.ForeignKey("commits.id"), nullable=False),
    sa.Column("baseline", HEX, sa.ForeignKey("commits.id"), nullable=False),
    sa.Column("fraction", sa.Float, nullable=False),
    sa.Column("started_at", TS, nullable=False),
    sa.Column("started_by", sa.String(200), nullable=False),
    sa.Column("stopped_at", TS, nullable=True),
    sa.Column("stopped_by", sa.String(200), nullable=True),
    sa.Column("outcome", sa.String(16), nullable=True),  # promoted | stopped
    sa.Column("reason", sa.Text, nullable=True),
    sa.Index("ix_canaries_line_channel_stopped_at", "line", "channel", "stopped_at"),
)
