"""Signing (issue 23): trusted keys, commits' and moves' signatures."""

from __future__ import annotations

import sqlalchemy as sa

from mint.schema import _commits, _refs  # noqa: F401  (the tables its foreign keys name)
from mint.schema._base import HEX, METADATA, TS

# Signing (issue 23). The public keys this repository trusts, each under a name; a private
# key never enters the repository. `fingerprint` is the sha256 of the key's PEM
# (SubjectPublicKeyInfo), the hint model_signing writes into a bundle.
signing_keys = sa.Table(
    "signing_keys",
    METADATA,
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("fingerprint", HEX, nullable=False, unique=True),
    sa.Column("public_pem", sa.Text, nullable=False),
    sa.Column("added_at", TS, nullable=False),
    sa.Column("added_by", sa.String(200), nullable=False),
    # What the key may sign (issue 35; mint.signing.trust): purposes among commits, sets and
    # moves, line globs, channel names; null: no limit (every key added before was so).
    sa.Column("purposes", sa.JSON, nullable=True),
    sa.Column("lines", sa.JSON, nullable=True),
    sa.Column("channels", sa.JSON, nullable=True),
)


# A commit's signatures: OpenSSF model-signing bundles (Sigstore bundle JSON), kept whole, each
# named by the sha256 of its bytes. A commit may carry several; the commit's id hashes none.
commit_signatures = sa.Table(
    "commit_signatures",
    METADATA,
    sa.Column("commit_id", HEX, sa.ForeignKey("commits.id"), primary_key=True),
    sa.Column("sha256", HEX, primary_key=True),
    sa.Column("bundle", sa.Text, nullable=False),
    sa.Column("key_hint", HEX, nullable=True),  # the bundle's public key hint, as it says
    sa.Column("added_at", TS, nullable=False),
)


# A move's signature: a DSSE bundle (Sigstore bundle JSON) of the in-toto statement of the
# move at ENTRY (mint.signing.moves), kept in the move's transaction; named by its sha256.
move_signatures = sa.Table(
    "move_signatures",
    METADATA,
    sa.Column("entry", sa.Integer, sa.ForeignKey("ref_history.id"), primary_key=True),
    sa.Column("sha256", HEX, nullable=False),
    sa.Column("bundle", sa.Text, nullable=False),
    sa.Column("key_hint", HEX, nullable=True),  # the bundle's public key hint, as it says
    sa.Column("added_at", TS, nullable=False),
)
