"""Reads the pages need to stay fast on large catalogs: only the rows a page shows, each on an
index. The same data is in the JSON API (`/lines`, `/tags?line=`, `/status`); these only
narrow it to one page."""

from __future__ import annotations

from collections import defaultdict

import sqlalchemy as sa

from mint import schema as s
from mint.ids import Kind, RefKind
from mint.objects import LineInfo
from mint.repo import Repo


def line_info(repo: Repo, name: str) -> LineInfo | None:
    """LINE's kind, head and number of commits (None: no such line)."""
    ln = s.lines.c
    q = sa.select(ln.name, ln.kind, ln.head, ln.commit_count).where(ln.name == name)
    with repo.db.read() as conn:
        row = conn.execute(q).first()
    return LineInfo(row.name, Kind(row.kind), row.head, row.commit_count) if row else None


def badges(repo: Repo, line: str, ids: list[str]) -> tuple[dict, dict]:
    """Commit id -> tag names, and commit id -> channel names, for the commits IDS of LINE
    (by the index on targets: a page's worth, however many tags the line has)."""
    tags: dict[str, list[str]] = defaultdict(list)
    channels: dict[str, list[str]] = defaultdict(list)
    if not ids:
        return tags, channels
    r = s.refs.c
    q = sa.select(r.name, r.kind, r.target).where(r.target.in_(ids), r.line == line)
    with repo.db.read() as conn:
        for name, kind, target in conn.execute(q.order_by(r.name)):
            (channels if kind == RefKind.CHANNEL else tags)[target].append(name)
    return tags, channels


def newest_tags(repo: Repo, lines: list[str], keep: int = 5) -> dict[str, tuple[list[str], int]]:
    """Line -> (its KEEP newest tag names, how many tags it has), for LINES."""
    if not lines:
        return {}
    r = s.refs.c
    where = (r.kind == RefKind.TAG, r.line.in_(lines))
    rank = sa.func.row_number().over(partition_by=r.line, order_by=(r.updated_at.desc(), r.name))
    ranked = sa.select(r.line, r.name, rank.label("k")).where(*where).subquery()
    q = sa.select(ranked.c.line, ranked.c.name).where(ranked.c.k <= keep)
    counts = sa.select(r.line, sa.func.count()).where(*where).group_by(r.line)
    out: dict[str, tuple[list[str], int]] = {}
    with repo.db.read() as conn:
        total = dict(conn.execute(counts).all())
        for line, name in conn.execute(q.order_by(ranked.c.line, ranked.c.k)):
            out.setdefault(line, ([], total.get(line, 0)))[0].append(name)
    return out


def holders(repo: Repo, lines: list[str]) -> dict[str, dict[str, str]]:
    """Line -> {channel: holder} for LINES (what `status` answers, for one page of lines)."""
    if not lines:
        return {}
    r = s.refs.c
    q = sa.select(r.line, r.name, r.target).where(r.kind == RefKind.CHANNEL, r.line.in_(lines))
    out: dict[str, dict[str, str]] = {}
    with repo.db.read() as conn:
        for line, name, target in conn.execute(q.order_by(r.line, r.name)):
            out.setdefault(line, {})[name] = target
    return out
