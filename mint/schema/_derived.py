"""Rows kept for speed, derived from others: search's meta and metric rows
(mint.search), set packs (mint.sets.pack)."""

from __future__ import annotations

import sqlalchemy as sa

from mint.schema import _commits, _gates  # noqa: F401  (the tables its foreign keys name)
from mint.schema._base import HEX, METADATA, TS

# A commit's meta as rows, written with the commit (mint.commits.rows.insert_commit): one
# index range finds the commits whose KEY is VALUE. A value is its text (a string) or its
# JSON (anything else); one longer than META_VALUE_MAX is not searchable.
commit_meta = sa.Table(
    "commit_meta",
    METADATA,
    sa.Column("commit_id", HEX, sa.ForeignKey("commits.id"), primary_key=True),
    sa.Column("key", sa.String(200), primary_key=True),
    sa.Column("value", sa.String(500), nullable=False),
    sa.Index("ix_commit_meta_key_value_commit_id", "key", "value", "commit_id"),
)


# Each evaluation's numeric metrics as rows, written with the evaluation: one index range
# finds the commits with an evaluation whose NAME compares with a number.
evaluation_metrics = sa.Table(
    "evaluation_metrics",
    METADATA,
    sa.Column("evaluation_id", sa.Integer, sa.ForeignKey("evaluations.id"), primary_key=True),
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("commit_id", HEX, sa.ForeignKey("commits.id"), nullable=False),
    sa.Column("value", sa.Float, nullable=False),
    sa.Index("ix_evaluation_metrics_name_value_commit_id", "name", "value", "commit_id"),
    # whether one commit meets a condition, when the search reads commits newest first
    sa.Index("ix_evaluation_metrics_commit_id_name_value", "commit_id", "name", "value"),
)


# A set commit's pack: its members' tensors in one blob, built at its first stage. The blob is
# a cache (rebuilt from the members when missing or corrupt); gc keeps it while a ref names the
# set (mint.maintenance).
set_packs = sa.Table(
    "set_packs",
    METADATA,
    sa.Column("set_id", HEX, sa.ForeignKey("commits.id"), primary_key=True),
    sa.Column("pack_id", HEX, nullable=False, index=True),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("built_at", TS, nullable=False),
)
