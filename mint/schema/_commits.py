"""The lines and their commits: the history `mint log` reads."""

from __future__ import annotations

import sqlalchemy as sa

from mint.schema._base import HEX, METADATA, TS

lines = sa.Table(
    "lines",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(100), nullable=False, unique=True),
    sa.Column("kind", sa.String(16), nullable=False),  # adapter | set
    sa.Column("head", HEX, nullable=True),
    sa.Column("commit_count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("created_at", TS, nullable=False),
)


commits = sa.Table(
    "commits",
    METADATA,
    sa.Column("id", HEX, primary_key=True),
    sa.Column("kind", sa.String(16), nullable=False),  # adapter | set
    sa.Column("line", sa.String(100), nullable=False, index=True),
    sa.Column("tree", HEX, nullable=False, index=True),  # hash of the files (and members)
    sa.Column("base", sa.String(200), nullable=True),
    sa.Column("base_fingerprint", HEX, nullable=True),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("author", sa.String(200), nullable=False),
    sa.Column("created_at", TS, nullable=False, index=True),
    sa.Column("meta", sa.JSON, nullable=False),
    sa.Column("provenance", sa.JSON, nullable=False),
    sa.Column("peft", sa.JSON, nullable=True),
    sa.Column("config", sa.JSON, nullable=True),  # adapter_config.json, or the set's mol.toml
    sa.Column("source_sha", sa.String(64), nullable=True, index=True),  # hub commit it came from
    # The identity that pushed it to this registry (its author is kept as written).
    sa.Column("pushed_by", sa.String(200), nullable=True),
    # `mint search --author A`, newest first.
    sa.Index("ix_commits_author_created_at", "author", "created_at"),
)


commit_parents = sa.Table(
    "commit_parents",
    METADATA,
    sa.Column("commit_id", HEX, sa.ForeignKey("commits.id"), primary_key=True),
    sa.Column("idx", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("parent_id", HEX, sa.ForeignKey("commits.id"), nullable=False, index=True),
)
