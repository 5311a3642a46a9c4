"""Proposals (a commit offered to a line, `refs/pr/N` on the Hub) and what the registry learnt
of the bytes the Hub's upload protocol sent it (issue 37)."""

from __future__ import annotations

import sqlalchemy as sa

from mint.schema import _commits, _refs  # noqa: F401  (the tables its foreign keys name)
from mint.schema._base import HEX, METADATA, TS

# A proposal is a commit on a line that no head holds until a writer merges it. Its number is
# the line's own (N of refs/pr/N). A merge moves the line's head by compare-and-swap in the
# transaction that closes the proposal; `entry` is that move's ref_history row.
proposals = sa.Table(
    "proposals",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("line", sa.String(100), nullable=False),
    sa.Column("number", sa.Integer, nullable=False),
    sa.Column("commit_id", HEX, sa.ForeignKey("commits.id"), nullable=False, index=True),
    sa.Column("base", HEX, nullable=True),  # the line's head it was proposed on
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),  # open | merged | closed
    sa.Column("created_by", sa.String(200), nullable=False),
    sa.Column("created_at", TS, nullable=False),
    sa.Column("closed_by", sa.String(200), nullable=True),  # who merged or closed it
    sa.Column("closed_at", TS, nullable=True),
    sa.Column("entry", sa.Integer, sa.ForeignKey("ref_history.id"), nullable=True),
    sa.UniqueConstraint("line", "number"),
)

# What an LFS upload learnt of its bytes in the pass that stored them: a safetensors file's
# header and tensor hashes (its values checked finite), so that the commit that names the blob
# reads it no more than `mint commit` reads a file its stat cache knows. A shortcut only: a
# blob without a row is read whole by the commit.
hub_uploads = sa.Table(
    "hub_uploads",
    METADATA,
    sa.Column("blob_id", HEX, primary_key=True),
    sa.Column("head", sa.LargeBinary, nullable=False),
    sa.Column("tensors", sa.JSON, nullable=False),
    sa.Column("at", TS, nullable=False),
)
