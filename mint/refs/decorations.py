"""The names that point at commits, as `mint log` shows them beside each (git's decorations):
the head of a line, the tags and channels, and the remotes' tags and channels as the last fetch
saw them, each written as a revision names it (chat, chat@v3, chat@production,
chat@origin/production)."""

from __future__ import annotations

import functools

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mint import schema as s
from mint.objects import Decoration

_ORDER = {"head": 0, "tag": 1, "channel": 2, "remote": 3}
_CHUNK = 500  # commit ids per statement (a whole log is read a chunk at a time)


def decorations(conn: Connection, ids: list[str], lines: set[str]) -> dict[str, list[Decoration]]:
    """Commit id -> the names pointing at it, for the commits IDS of LINES (the lines they are
    on: a line's head is looked up among those). Head first, then tags, channels and the
    remotes' refs, each by name. One statement per 500 commits, on indexes."""
    found: dict[str, list[Decoration]] = {}
    for i in range(0, len(ids), _CHUNK):
        params = {"ids": ids[i : i + _CHUNK], "lines": sorted(lines)}
        for commit, name, kind in conn.execute(_pointing_at(), params):
            found.setdefault(commit, []).append(Decoration(name, kind))
    return {c: sorted(d, key=lambda x: (_ORDER[x.kind], x.name)) for c, d in found.items()}


@functools.cache
def _pointing_at():
    """(commit, name, kind) of every name pointing at the commits :ids: the heads among the
    lines :lines (their unique index), the refs and the remote-tracking refs by target (their
    indexes). Built once, its lists bound (expanding)."""
    ln, ref, rr = s.lines.c, s.refs.c, s.remote_refs.c
    ids = sa.bindparam("ids", expanding=True)
    heads = sa.select(ln.head, ln.name, sa.literal("head", sa.String)).where(
        ln.name.in_(sa.bindparam("lines", expanding=True)), ln.head.in_(ids)
    )
    refs = sa.select(ref.target, ref.line + "@" + ref.name, ref.kind).where(ref.target.in_(ids))
    remote = sa.select(
        rr.target, rr.line + "@" + rr.remote + "/" + rr.name, sa.literal("remote", sa.String)
    ).where(rr.target.in_(ids))
    return sa.union_all(heads, refs, remote)
