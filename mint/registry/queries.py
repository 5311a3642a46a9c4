"""Reads the server needs beyond the façade: the line a revision is on, the lines a blob
belongs to and the lines a commit shows (for tokens limited to lines), and a commit's
evaluations."""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa

from mint import schema as s
from mint.commits import rows
from mint.refs import resolve
from mint.repo import Repo


def line_of(repo: Repo, rev: str) -> str:
    """The line of the commit REV names (RevisionNotFound if none)."""
    with repo.db.read() as conn:
        return rows.commit_row(conn, resolve(conn, rev).id).line


def commit_of(conn, rev: str) -> tuple[str, str]:
    """(id, line) of the commit REV names (RevisionNotFound if none), in the caller's
    transaction (CONN)."""
    cid = resolve(conn, rev).id
    return cid, rows.commit_row(conn, cid).line


IN_CHUNK = 500  # ids per `IN (...)`: well under SQLite's limit on bound parameters


def shown_lines(conn, ids: Iterable[str]) -> set[str]:
    """The lines of the commits IDS and of every commit they show: a set's checkout holds its
    members' files, so a set shows its members (and theirs, should a member be a set)."""
    c, m = s.commits.c, s.set_members.c
    lines: set[str] = set()
    seen: set[str] = set()
    todo = list(dict.fromkeys(ids))
    while todo:
        seen.update(todo)
        members: list[str] = []
        for i in range(0, len(todo), IN_CHUNK):
            part = todo[i : i + IN_CHUNK]
            lines.update(
                conn.execute(sa.select(c.line).where(c.id.in_(part)).distinct()).scalars()
            )
            members += conn.execute(sa.select(m.member_id).where(m.commit_id.in_(part))).scalars()
        todo = [x for x in dict.fromkeys(members) if x not in seen]
    return lines


def blob_lines(repo: Repo, blob_id: str) -> list[str]:
    """The lines whose commits hold the blob as one of their files."""
    q = (
        sa.select(s.commits.c.line)
        .join(s.files, s.files.c.commit_id == s.commits.c.id)
        .where(s.files.c.blob_id == blob_id)
        .distinct()
    )
    with repo.db.read() as conn:
        return sorted(conn.execute(q).scalars())


def commit_lines(repo: Repo, ids: list[str]) -> dict[str, str]:
    """The line of each commit of IDS that is here."""
    if not ids:
        return {}
    c = s.commits.c
    with repo.db.read() as conn:
        return dict(conn.execute(sa.select(c.id, c.line).where(c.id.in_(ids))).tuples().all())


def unknown_contract_versions(repo: Repo, pairs: set[tuple[str, int]]) -> list[str]:
    """ "NAME vN" for each (name, version) of PAIRS that no contract here has."""
    c = s.contracts.c
    out = []
    with repo.db.read() as conn:
        for name, version in sorted(pairs):
            q = sa.select(c.id).where(c.name == name, c.version == version)
            if conn.execute(q).first() is None:
                out.append(f"{name} v{version}")
    return out
