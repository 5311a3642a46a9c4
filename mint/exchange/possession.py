"""Proof of possession: a token limited to lines names a stored blob only if it may read it
or has shown that it holds its bytes.

Knowing a blob's sha256 is not holding it: an id can leak (a model card, a public base's
file listing). Without this rule a token limited to `coding*` could push a commit on
`coding-x` naming a blob of line `secret`, which the store already has, and then read the
secret bytes through that commit. So a limited token may name a stored blob only when a
commit of one of its lines holds it already, or when the token uploaded it: the upload
hashes every byte against the id, and records a grant (`blob_grants`). Tokens without line
limits read every blob anyway and need no proof.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import sqlalchemy as sa

from mint import schema as s
from mint.db import insert_new
from mint.ids import utcnow

IN_CHUNK = 500  # ids per `IN (...)`: well under SQLite's limit on bound parameters


def unproven(
    conn, blob_ids: Iterable[str], *, token: str, may_read: Callable[[str], bool]
) -> list[str]:
    """The ids of BLOB_IDS (in their order) that no commit on a line MAY_READ accepts holds
    and that TOKEN has not uploaded. A query or two per IN_CHUNK ids, never one per blob."""
    ids = list(dict.fromkeys(blob_ids))
    f, c, g = s.files.c, s.commits.c, s.blob_grants.c
    proven: set[str] = set()
    for i in range(0, len(ids), IN_CHUNK):
        part = ids[i : i + IN_CHUNK]
        held = sa.select(f.blob_id, c.line).join(s.commits, c.id == f.commit_id)
        held = held.where(f.blob_id.in_(part)).distinct()
        proven.update(b for b, line in conn.execute(held) if may_read(line))
        rest = [b for b in part if b not in proven]
        if rest:
            granted = sa.select(g.blob_id).where(g.token == token, g.blob_id.in_(rest))
            proven.update(conn.execute(granted).scalars())
    return [b for b in ids if b not in proven]


def grant(conn, token: str, blob_id: str) -> None:
    """Record that TOKEN uploaded BLOB_ID's bytes (verified against the id); once is enough."""
    insert_new(conn, s.blob_grants, {"token": token, "blob_id": blob_id, "at": utcnow()})


def forget(conn, blob_ids: list[str]) -> None:
    """Drop the grants of BLOB_IDS (gc deleted them: a grant is of bytes that are stored), and
    what an upload learnt of those bytes (`hub_uploads`)."""
    g, h = s.blob_grants.c.blob_id, s.hub_uploads.c.blob_id
    for i in range(0, len(blob_ids), IN_CHUNK):
        conn.execute(s.blob_grants.delete().where(g.in_(blob_ids[i : i + IN_CHUNK])))
        conn.execute(s.hub_uploads.delete().where(h.in_(blob_ids[i : i + IN_CHUNK])))
