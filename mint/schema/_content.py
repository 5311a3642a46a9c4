"""What a commit holds: its files, tensors and set members, and the bases."""

from __future__ import annotations

import sqlalchemy as sa

from mint.schema import _commits  # noqa: F401  (the tables its foreign keys name)
from mint.schema._base import HEX, METADATA, TS

bases = sa.Table(
    "bases",
    METADATA,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("fingerprint", HEX, nullable=False),
    sa.Column("config", sa.JSON, nullable=False),
    sa.Column("source", sa.Text, nullable=True),
    sa.Column("created_at", TS, nullable=False),
)


files = sa.Table(
    "files",
    METADATA,
    sa.Column("commit_id", HEX, sa.ForeignKey("commits.id"), primary_key=True),
    sa.Column("path", sa.String(1000), primary_key=True),
    sa.Column("blob_id", HEX, nullable=False, index=True),
    sa.Column("size", sa.BigInteger, nullable=False),
)


tensors = sa.Table(
    "tensors",
    METADATA,
    sa.Column("commit_id", HEX, sa.ForeignKey("commits.id"), primary_key=True),
    sa.Column("file", sa.String(1000), primary_key=True),
    sa.Column("name", sa.String(1000), primary_key=True),
    sa.Column("dtype", sa.String(16), nullable=False),
    sa.Column("shape", sa.JSON, nullable=False),
    sa.Column("sha256", HEX, nullable=False),
    sa.Column("nbytes", sa.BigInteger, nullable=False),
    sa.Column("offset", sa.BigInteger, nullable=False),  # of the data, within the file
)


# A set commit's members: the router, each expert and the summary adapter.
set_members = sa.Table(
    "set_members",
    METADATA,
    sa.Column("commit_id", HEX, sa.ForeignKey("commits.id"), primary_key=True),
    sa.Column("role", sa.String(16), primary_key=True),  # router | expert | summary
    sa.Column("label", sa.String(100), primary_key=True),
    sa.Column("member_id", HEX, sa.ForeignKey("commits.id"), nullable=False, index=True),
    sa.Column("requested", sa.String(300), nullable=False),  # the ref as written in mol.toml
)
