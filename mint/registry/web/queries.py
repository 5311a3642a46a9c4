"""Reads the pages need to stay fast on large catalogs: only the rows a page shows, each on an
index. The same data is in the JSON API (`/lines`, `/tags?line=`, `/status`); these only
narrow it to one page."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import sqlalchemy as sa

from mint import schema as s
from mint.gates.history import move_of
from mint.ids import Kind, RefKind, iso
from mint.objects import LineInfo, Move
from mint.repo import Repo


@dataclass(frozen=True)
class Summary:
    """What a page shows beside a commit id: its message's first line, author, time and
    the tags that point at it."""

    id: str
    kind: Kind
    line: str
    subject: str
    author: str
    at: str
    tags: list[str]


def summaries(repo: Repo, ids) -> dict[str, Summary]:
    """Commit id -> Summary for the commits IDS (unknown ids are left out): two queries on
    primary keys and the index on ref targets, for the few dozen ids a page shows."""
    ids = sorted({i for i in ids if i})
    if not ids:
        return {}
    c, r = s.commits.c, s.refs.c
    tags: dict[str, list[str]] = defaultdict(list)
    q = sa.select(c.id, c.kind, c.line, c.message, c.author, c.created_at).where(c.id.in_(ids))
    t = sa.select(r.target, r.name).where(r.target.in_(ids), r.kind == RefKind.TAG)
    with repo.db.read() as conn:
        for target, name in conn.execute(t.order_by(r.name)):
            tags[target].append(name)
        found = conn.execute(q).all()
    return {
        row.id: Summary(
            row.id,
            Kind(row.kind),
            row.line,
            _subject(row.message),
            row.author,
            iso(row.created_at),
            tags[row.id],
        )
        for row in found
    }


def _subject(message: str | None) -> str:
    text = (message or "").strip()
    return text.splitlines()[0] if text else ""


def holder_move(repo: Repo, line: str, channel: str) -> Move | None:
    """The move that put LINE@CHANNEL's holder there (None: no such channel)."""
    r = s.refs.c
    q = sa.select(r.entry).where(r.line == line, r.name == channel, r.kind == RefKind.CHANNEL)
    with repo.db.read() as conn:
        entry = conn.execute(q).scalar()
        return move_of(conn, entry) if entry is not None else None


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
