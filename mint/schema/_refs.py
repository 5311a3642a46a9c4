"""Tags and channels, the remotes' as last fetched, and every move."""

from __future__ import annotations

import sqlalchemy as sa

from mint.schema import _commits  # noqa: F401  (the tables its foreign keys name)
from mint.schema._base import HEX, METADATA, TS

# Tags and channels. A tag is immutable unless forced; a channel moves by promote/rollback.
refs = sa.Table(
    "refs",
    METADATA,
    sa.Column("line", sa.String(100), primary_key=True),
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("kind", sa.String(16), nullable=False),  # tag | channel
    sa.Column("target", HEX, sa.ForeignKey("commits.id"), nullable=False, index=True),
    sa.Column("message", sa.Text, nullable=True),
    sa.Column("updated_at", TS, nullable=False),
    # The history entry that set the current target; rollbacks follow its `back` chain.
    sa.Column("entry", sa.Integer, nullable=True),
    # Every channel (status) in one index range, without reading the table or the tags.
    sa.Index("ix_refs_kind_line_name_target", "kind", "line", "name", "target"),
    # `mint search --tag T`: the commits a tag of that name points to, on any line.
    sa.Index("ix_refs_name_kind_target", "name", "kind", "target"),
)


# Remote-tracking refs: the channels and tags a remote had at the last fetch or clone, kept
# read-only as REMOTE/NAME (git's refs/remotes). Every fetch of a line replaces its rows.
remote_refs = sa.Table(
    "remote_refs",
    METADATA,
    sa.Column("remote", sa.String(100), primary_key=True),
    sa.Column("line", sa.String(100), primary_key=True),
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("kind", sa.String(16), nullable=False),  # tag | channel
    sa.Column("target", HEX, sa.ForeignKey("commits.id"), nullable=False, index=True),
    sa.Column("updated_at", TS, nullable=False),
)


# Append-only: every move of a tag or channel. Rows are never updated or deleted.
ref_history = sa.Table(
    "ref_history",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("line", sa.String(100), nullable=False),
    sa.Column("name", sa.String(100), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("action", sa.String(16), nullable=False),  # create|force|delete|promote|rollback
    sa.Column("old", HEX, nullable=True),
    sa.Column("new", HEX, nullable=True),
    sa.Column("by", sa.String(200), nullable=False),
    sa.Column("at", TS, nullable=False),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("contract", HEX, nullable=True),
    sa.Column("evaluations", sa.JSON, nullable=True),
    # The entry whose target a rollback from this one restores (a stack as a linked list).
    sa.Column("back", sa.Integer, nullable=True),
    sa.Index("ix_ref_history_line_name_id", "line", "name", "id"),
    sa.Index("ix_ref_history_line_name_new", "line", "name", "new"),
)
