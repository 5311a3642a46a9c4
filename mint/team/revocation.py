"""A token's revocation, announced to every registry replica (issue 35).

A replica remembers the tokens it found good (`mint.registry.auth.TokenCache`), so that a
request costs no read of the tokens table. A revocation must reach every replica's memory on
its next request, whatever door it came through (the repository's own CLI, any replica's API
or pages): `announce`, in the revoking transaction, tells them, and
`mint.registry.token_watch` is what each replica listens with.

- PostgreSQL: `pg_notify` on CHANNEL, which the database delivers when the transaction
  commits to every session that listens (one per replica), and never if it rolls back.
- SQLite: nothing to send. A replica watches the database file itself (`PRAGMA
  data_version` changes whenever another connection commits), so any write at all, a
  revocation among them, makes it read the tokens again.
"""

from __future__ import annotations

import sqlalchemy as sa

CHANNEL = "mint_token_revoked"  # PostgreSQL's notification channel


def announce(conn) -> None:
    """Tell every replica, when CONN's transaction commits, to forget the tokens it holds."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_notify(:channel, '')"), {"channel": CHANNEL})
