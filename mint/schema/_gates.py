"""Contracts, evaluations and approvals: what gates a channel."""

from __future__ import annotations

import sqlalchemy as sa

from mint.schema import _commits  # noqa: F401  (the tables its foreign keys name)
from mint.schema._base import HEX, METADATA, TS

contracts = sa.Table(
    "contracts",
    METADATA,
    sa.Column("id", HEX, primary_key=True),  # sha256 of the canonical body
    sa.Column("name", sa.String(100), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("channel", sa.String(100), nullable=False, index=True),
    sa.Column("body", sa.JSON, nullable=False),
    sa.Column("lines", sa.JSON, nullable=True),  # lines it is limited to; null: every line
    sa.Column("source", sa.Text, nullable=False),  # the TOML as given
    sa.Column("created_at", TS, nullable=False),
    sa.Column("created_by", sa.String(200), nullable=False),
    # Its scope: the sha256 of its sorted line globs, '' for every line (issue 37). A contract
    # is its name within its scope: two teams each keep a `production` for their own lines.
    sa.Column("scope", HEX, nullable=False, server_default=""),
    sa.UniqueConstraint("name", "scope", "version"),
)


evaluations = sa.Table(
    "evaluations",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("commit_id", HEX, sa.ForeignKey("commits.id"), nullable=False),
    sa.Column("contract_id", HEX, sa.ForeignKey("contracts.id"), nullable=False),
    sa.Column("metrics", sa.JSON, nullable=False),
    sa.Column("source", sa.String(16), nullable=False),  # a mint.ids.EvalSource
    sa.Column("evaluator", sa.JSON, nullable=True),  # command, version
    sa.Column("data_hash", sa.String(64), nullable=True),
    sa.Column("by", sa.String(200), nullable=False),
    sa.Column("at", TS, nullable=False),
    # The identity that pushed it to this registry (`by` is who ran it, as recorded there).
    sa.Column("pushed_by", sa.String(200), nullable=True),
    sa.Index("ix_evaluations_commit_id_contract_id_id", "commit_id", "contract_id", "id"),
)


approvals = sa.Table(
    "approvals",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("commit_id", HEX, sa.ForeignKey("commits.id"), nullable=False),
    sa.Column("channel", sa.String(100), nullable=False),
    sa.Column("by", sa.String(200), nullable=False),
    sa.Column("at", TS, nullable=False),
    sa.UniqueConstraint("commit_id", "channel", "by"),
)
