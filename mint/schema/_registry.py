"""The registry's: tokens, blob grants, protected channels, webhooks."""

from __future__ import annotations

import sqlalchemy as sa

from mint.schema._base import HEX, METADATA, TS

# Bearer tokens: only a sha256 of each is kept. A revoked token stays, marked, so its name
# (the identity history records) is never reused by a new token.
tokens = sa.Table(
    "tokens",
    METADATA,
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("hash", HEX, nullable=False, unique=True),
    sa.Column("role", sa.String(16), nullable=False),  # reader | writer | maintainer | admin
    sa.Column("lines", sa.JSON, nullable=True),  # globs of the lines it may touch; null: all
    sa.Column("created_at", TS, nullable=False),
    sa.Column("created_by", sa.String(200), nullable=False),
    sa.Column("revoked_at", TS, nullable=True),
)


# Proof of possession: a token limited to lines uploaded these bytes (verified against the
# id), so a push of it may name the blob though no commit of its lines holds it. Without this
# a token that learned a blob's sha256 could name another line's blob and then read it.
# A grant goes with its blob when gc deletes the blob (mint.maintenance).
blob_grants = sa.Table(
    "blob_grants",
    METADATA,
    sa.Column("token", sa.String(100), sa.ForeignKey("tokens.name"), primary_key=True),
    sa.Column("blob_id", HEX, primary_key=True),
    sa.Column("at", TS, nullable=False),
    sa.Index("ix_blob_grants_blob_id", "blob_id"),
)


# Channels that need a role to move (promote, rollback, force).
protected_channels = sa.Table(
    "protected_channels",
    METADATA,
    sa.Column("channel", sa.String(100), primary_key=True),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("created_at", TS, nullable=False),
    sa.Column("created_by", sa.String(200), nullable=False),
    # Every move of the channel needs a signed statement by a trusted key (mint.signing.moves).
    sa.Column("signed", sa.Boolean, nullable=False, server_default=sa.false()),
    # The trusted keys (names) whose signatures a signed channel's moves take; null: any
    # trusted key that may sign moves of it (issue 35).
    sa.Column("signed_by", sa.JSON, nullable=True),
)


# Webhooks: each event (a ref_history row) is POSTed to every active hook that wants its
# type. The secret is never stored: the registry reads it from the environment variable
# named by `secret_env` when it signs. `cursor` is the last ref_history id fanned out.
webhooks = sa.Table(
    "webhooks",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("secret_env", sa.String(100), nullable=False),
    sa.Column("events", sa.JSON, nullable=True),  # event types; null: every type
    sa.Column("cursor", sa.Integer, nullable=False),
    sa.Column("created_at", TS, nullable=False),
    sa.Column("created_by", sa.String(200), nullable=False),
    sa.Column("removed_at", TS, nullable=True),
)


# One row per (hook, event): its delivery state. A replica claims a due row by moving
# `lease_until` forward with a compare-and-swap, so two replicas never send it twice.
webhook_deliveries = sa.Table(
    "webhook_deliveries",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("webhook_id", sa.Integer, sa.ForeignKey("webhooks.id"), nullable=False),
    sa.Column("event_id", sa.Integer, nullable=False),
    sa.Column("event_type", sa.String(32), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),  # pending | delivered | failed
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("next_at", TS, nullable=False),
    sa.Column("lease_until", TS, nullable=True),
    sa.Column("response_code", sa.Integer, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("delivered_at", TS, nullable=True),
    sa.UniqueConstraint("webhook_id", "event_id"),
    sa.Index("ix_webhook_deliveries_status_next_at", "status", "next_at"),
)
