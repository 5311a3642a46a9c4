"""Remote-tracking refs: a remote's channels and tags as the last fetch or clone saw them.

As git keeps `refs/remotes/origin/*`, a repository keeps each fetched line's channels and tags
as `LINE@REMOTE/NAME` (`chat@origin/production`). They are read-only here: only a fetch writes
them, replacing a line's set at once, so that a ref the registry no longer has is pruned (what
`git fetch --prune` does). `LINE@NAME` falls back to them when LINE has no tag or channel NAME
here (a local ref always wins; see `mint.refs.revisions`). Nothing else moves them: a tag,
promote or rollback of `REMOTE/NAME` is refused by name (`check_name`).
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mint import schema as s
from mint.db import insert_new
from mint.ids import CommitId, RefKind, iso, utcnow
from mint.repo import Repo


@dataclass(frozen=True)
class RemoteRef:
    """REMOTE's channel or tag NAME of LINE, at TARGET when last fetched."""

    remote: str
    line: str
    name: str
    kind: RefKind
    target: CommitId
    updated_at: str

    @property
    def ref(self) -> str:
        """How a revision names it: LINE@REMOTE/NAME."""
        return f"{self.line}@{self.remote}/{self.name}"


def track(
    conn: Connection, remote: str, line: str, refs: dict[str, tuple[RefKind, str]]
) -> list[str]:
    """Make REMOTE's refs of LINE exactly REFS (name -> (kind, target)), in CONN's transaction;
    a ref whose commit is not here is left out. Returns the refs pruned, as LINE@REMOTE/NAME."""
    r = s.remote_refs.c
    mine = (r.remote == remote) & (r.line == line)
    before = {row.name: row for row in conn.execute(sa.select(s.remote_refs).where(mine))}
    known = _known(conn, [target for _, target in refs.values()])
    now = utcnow()
    for name, (kind, target) in sorted(refs.items()):
        if target not in known:
            continue
        old = before.pop(name, None)
        row = dict(kind=kind, target=target, updated_at=now)
        if old is None and insert_new(
            conn, s.remote_refs, dict(remote=remote, line=line, name=name, **row)
        ):
            continue
        if old is None or (old.kind, old.target) != (kind, target):
            conn.execute(s.remote_refs.update().where(mine, r.name == name).values(**row))
    gone = sorted(before)
    if gone:
        conn.execute(s.remote_refs.delete().where(mine, r.name.in_(gone)))
    return [f"{line}@{remote}/{name}" for name in gone]


def prune_lines(conn: Connection, remote: str, lines: list[str]) -> list[str]:
    """Forget REMOTE's refs of every line but LINES (a whole fetch: the lines the registry
    still shows). Returns the refs pruned, as LINE@REMOTE/NAME."""
    r = s.remote_refs.c
    q = sa.select(r.line, r.name).where(r.remote == remote, r.line.not_in(lines))
    gone = [f"{line}@{remote}/{name}" for line, name in conn.execute(q.order_by(r.line, r.name))]
    if gone:
        conn.execute(s.remote_refs.delete().where(r.remote == remote, r.line.not_in(lines)))
    return gone


def tracked(
    conn: Connection, *, line: str | None = None, lines: tuple[str, str] | None = None
) -> list[RemoteRef]:
    """The remote-tracking refs of LINE (or of the lines from LINES[0] to LINES[1], or of every
    line), by line, remote and name."""
    r = s.remote_refs.c
    q = sa.select(s.remote_refs)
    if line is not None:
        q = q.where(r.line == line)
    if lines is not None:
        q = q.where(r.line >= lines[0], r.line <= lines[1])
    return [_ref(row) for row in conn.execute(q.order_by(r.line, r.remote, r.name))]


def named(conn: Connection, line: str, name: str) -> list[RemoteRef]:
    """What LINE@NAME may mean among the remote-tracking refs: REMOTE/NAME itself, or NAME on
    each remote that has it."""
    r = s.remote_refs.c
    remote, slash, short = name.partition("/")
    q = sa.select(s.remote_refs).where(r.line == line)
    q = q.where(r.remote == remote, r.name == short) if slash else q.where(r.name == name)
    return [_ref(row) for row in conn.execute(q.order_by(r.remote))]


def names_of(conn: Connection, line: str) -> list[str]:
    """How the remote-tracking refs of LINE may be written after `LINE@`: REMOTE/NAME each,
    and NAME alone where the line has no tag or channel of that name."""
    r = s.remote_refs.c
    found = conn.execute(sa.select(r.remote, r.name).where(r.line == line)).all()
    local = set(conn.execute(sa.select(s.refs.c.name).where(s.refs.c.line == line)).scalars())
    short = sorted({name for _, name in found} - local)
    return sorted(f"{remote}/{name}" for remote, name in found) + short


def _known(conn: Connection, ids: list[str]) -> set[str]:
    if not ids:
        return set()
    q = sa.select(s.commits.c.id).where(s.commits.c.id.in_(sorted(set(ids))))
    return set(conn.execute(q).scalars())


def _ref(row) -> RemoteRef:
    return RemoteRef(
        row.remote,
        row.line,
        row.name,
        RefKind(row.kind),
        CommitId(row.target),
        iso(row.updated_at),
    )


# --- operations ---------------------------------------------------------------------


def remote_refs(repo: Repo, line: str | None = None) -> list[RemoteRef]:
    """The remote-tracking refs here (of LINE, or of every line), by line, remote and name."""
    with repo.db.read() as conn:
        return tracked(conn, line=line)


def remote_refs_forget(repo: Repo, remote: str) -> int:
    """Forget every remote-tracking ref of REMOTE (it was removed). Returns how many."""
    with repo.db.write() as conn:
        q = s.remote_refs.delete().where(s.remote_refs.c.remote == remote)
        return conn.execute(q).rowcount
