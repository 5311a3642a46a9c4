"""The metadata tables (SQLAlchemy Core). Alembic migrations are the only way they change."""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

HEX = sa.String(64)
TS = sa.DateTime(timezone=True)

bases = sa.Table(
    "bases",
    metadata,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("fingerprint", HEX, nullable=False),
    sa.Column("config", sa.JSON, nullable=False),
    sa.Column("source", sa.Text, nullable=True),
    sa.Column("created_at", TS, nullable=False),
)

lines = sa.Table(
    "lines",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(100), nullable=False, unique=True),
    sa.Column("kind", sa.String(16), nullable=False),  # adapter | set
    sa.Column("head", HEX, nullable=True),
    sa.Column("commit_count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("created_at", TS, nullable=False),
)

commits = sa.Table(
    "commits",
    metadata,
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
    metadata,
    sa.Column("commit_id", HEX, sa.ForeignKey("commits.id"), primary_key=True),
    sa.Column("idx", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("parent_id", HEX, sa.ForeignKey("commits.id"), nullable=False, index=True),
)

files = sa.Table(
    "files",
    metadata,
    sa.Column("commit_id", HEX, sa.ForeignKey("commits.id"), primary_key=True),
    sa.Column("path", sa.String(1000), primary_key=True),
    sa.Column("blob_id", HEX, nullable=False, index=True),
    sa.Column("size", sa.BigInteger, nullable=False),
)

tensors = sa.Table(
    "tensors",
    metadata,
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
    metadata,
    sa.Column("commit_id", HEX, sa.ForeignKey("commits.id"), primary_key=True),
    sa.Column("role", sa.String(16), primary_key=True),  # router | expert | summary
    sa.Column("label", sa.String(100), primary_key=True),
    sa.Column("member_id", HEX, sa.ForeignKey("commits.id"), nullable=False, index=True),
    sa.Column("requested", sa.String(300), nullable=False),  # the ref as written in mol.toml
)

# Tags and channels. A tag is immutable unless forced; a channel moves by promote/rollback.
refs = sa.Table(
    "refs",
    metadata,
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
    metadata,
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
    metadata,
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

contracts = sa.Table(
    "contracts",
    metadata,
    sa.Column("id", HEX, primary_key=True),  # sha256 of the canonical body
    sa.Column("name", sa.String(100), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("channel", sa.String(100), nullable=False, index=True),
    sa.Column("body", sa.JSON, nullable=False),
    sa.Column("lines", sa.JSON, nullable=True),  # lines it is limited to; null: every line
    sa.Column("source", sa.Text, nullable=False),  # the TOML as given
    sa.Column("created_at", TS, nullable=False),
    sa.Column("created_by", sa.String(200), nullable=False),
    sa.UniqueConstraint("name", "version"),
)

evaluations = sa.Table(
    "evaluations",
    metadata,
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
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("commit_id", HEX, sa.ForeignKey("commits.id"), nullable=False),
    sa.Column("channel", sa.String(100), nullable=False),
    sa.Column("by", sa.String(200), nullable=False),
    sa.Column("at", TS, nullable=False),
    sa.UniqueConstraint("commit_id", "channel", "by"),
)

# --- the registry ----------------------------------------------------------------

# Bearer tokens: only a sha256 of each is kept. A revoked token stays, marked, so its name
# (the identity history records) is never reused by a new token.
tokens = sa.Table(
    "tokens",
    metadata,
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
    metadata,
    sa.Column("token", sa.String(100), sa.ForeignKey("tokens.name"), primary_key=True),
    sa.Column("blob_id", HEX, primary_key=True),
    sa.Column("at", TS, nullable=False),
    sa.Index("ix_blob_grants_blob_id", "blob_id"),
)

# Channels that need a role to move (promote, rollback, force).
protected_channels = sa.Table(
    "protected_channels",
    metadata,
    sa.Column("channel", sa.String(100), primary_key=True),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("created_at", TS, nullable=False),
    sa.Column("created_by", sa.String(200), nullable=False),
    # Every move of the channel needs a signed statement by a trusted key (mint.signing.moves).
    sa.Column("signed", sa.Boolean, nullable=False, server_default=sa.false()),
)

# Webhooks: each event (a ref_history row) is POSTed to every active hook that wants its
# type. The secret is never stored: the registry reads it from the environment variable
# named by `secret_env` when it signs. `cursor` is the last ref_history id fanned out.
webhooks = sa.Table(
    "webhooks",
    metadata,
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
    metadata,
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

# --- learning from deployment ----------------------------------------------------

# One row per served turn. `id` is the completion id the server returned.
traces = sa.Table(
    "traces",
    metadata,
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
    metadata,
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
    metadata,
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
    metadata,
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

# Signing (issue 23). The public keys this repository trusts, each under a name; a private
# key never enters the repository. `fingerprint` is the sha256 of the key's PEM
# (SubjectPublicKeyInfo), the hint model_signing writes into a bundle.
signing_keys = sa.Table(
    "signing_keys",
    metadata,
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("fingerprint", HEX, nullable=False, unique=True),
    sa.Column("public_pem", sa.Text, nullable=False),
    sa.Column("added_at", TS, nullable=False),
    sa.Column("added_by", sa.String(200), nullable=False),
)

# A commit's signatures: OpenSSF model-signing bundles (Sigstore bundle JSON), kept whole, each
# named by the sha256 of its bytes. A commit may carry several; the commit's id hashes none.
commit_signatures = sa.Table(
    "commit_signatures",
    metadata,
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
    metadata,
    sa.Column("entry", sa.Integer, sa.ForeignKey("ref_history.id"), primary_key=True),
    sa.Column("sha256", HEX, nullable=False),
    sa.Column("bundle", sa.Text, nullable=False),
    sa.Column("key_hint", HEX, nullable=True),  # the bundle's public key hint, as it says
    sa.Column("added_at", TS, nullable=False),
)

# --- search (mint.search) ---------------------------------------------------------

# A commit's meta as rows, written with the commit (mint.commits.rows.insert_commit): one
# index range finds the commits whose KEY is VALUE. A value is its text (a string) or its
# JSON (anything else); one longer than META_VALUE_MAX is not searchable.
commit_meta = sa.Table(
    "commit_meta",
    metadata,
    sa.Column("commit_id", HEX, sa.ForeignKey("commits.id"), primary_key=True),
    sa.Column("key", sa.String(200), primary_key=True),
    sa.Column("value", sa.String(500), nullable=False),
    sa.Index("ix_commit_meta_key_value_commit_id", "key", "value", "commit_id"),
)

# Each evaluation's numeric metrics as rows, written with the evaluation: one index range
# finds the commits with an evaluation whose NAME compares with a number.
evaluation_metrics = sa.Table(
    "evaluation_metrics",
    metadata,
    sa.Column("evaluation_id", sa.Integer, sa.ForeignKey("evaluations.id"), primary_key=True),
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("commit_id", HEX, sa.ForeignKey("commits.id"), nullable=False),
    sa.Column("value", sa.Float, nullable=False),
    sa.Index("ix_evaluation_metrics_name_value_commit_id", "name", "value", "commit_id"),
    # whether one commit meets a condition, when the search reads commits newest first
    sa.Index("ix_evaluation_metrics_commit_id_name_value", "commit_id", "name", "value"),
)

# --- packs (mint.sets.pack) --------------------------------------------------------

# A set commit's pack: its members' tensors in one blob, built at its first stage. The blob is
# a cache (rebuilt from the members when missing or corrupt); gc keeps it while a ref names the
# set (mint.maintenance).
set_packs = sa.Table(
    "set_packs",
    metadata,
    sa.Column("set_id", HEX, sa.ForeignKey("commits.id"), primary_key=True),
    sa.Column("pack_id", HEX, nullable=False, index=True),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("built_at", TS, nullable=False),
)
