"""Moving a line head: by compare-and-swap, fast-forward only unless forced, and where lines
stand (their heads, a set's members' lines, ancestry)."""

from __future__ import annotations

import sqlalchemy as sa

from mint import schema as s
from mint.commits import rows
from mint.errors import NotFastForward, RefConflict, RevisionNotFound, WrongKind
from mint.ids import Action, Kind
from mint.refs import RefsContainer, check_name
from mint.repo import Repo


def move_head(repo: Repo, line: str, old: str | None, new: str, *, force: bool, by: str) -> None:
    """Point LINE at NEW if it is still at OLD (None: the line is new); NEW must descend from
    OLD unless FORCE. The refs container moves it by compare-and-swap and logs it in
    ref_history as a head move."""
    with repo.db.write() as conn:
        move_head_in(conn, line, old, new, force=force, by=by)


def move_head_in(conn, line: str, old: str | None, new: str, *, force: bool, by: str) -> None:
    """`move_head` in the caller's transaction (CONN)."""
    check_name("line", line)
    row = rows.commit_row(conn, new)
    if row.line != line:
        raise WrongKind(f"{new[:12]} is a commit of line {row.line}, not {line}")
    refs = RefsContainer(conn)
    head = refs.head(line)
    if head != old:
        raise RefConflict(f"line {line}", old, head)
    if head == new:
        return
    if head is not None and not force and not is_ancestor(conn, head, new):
        raise NotFastForward(line, head, new)
    action = Action.FORCE if force and head is not None else Action.PUSH
    refs.move_head(line, Kind(row.kind), head, new, by=by, action=action)


def is_ancestor(conn, ancestor: str, descendant: str) -> bool:
    """Whether ANCESTOR is DESCENDANT or one of its ancestors (through parents)."""
    cp = s.commit_parents
    seed = sa.select(sa.literal(descendant, sa.String(64)).label("id"))
    anc = seed.cte("anc", recursive=True)
    anc = anc.union(sa.select(cp.c.parent_id).join(anc, cp.c.commit_id == anc.c.id))
    q = sa.select(anc.c.id).where(anc.c.id == ancestor).limit(1)
    return conn.execute(q).first() is not None


def line_heads(conn, names: list[str]) -> dict[str, str | None]:
    """Where each line of NAMES has its head (None: no such line, or no commit yet)."""
    q = sa.select(s.lines.c.name, s.lines.c.head).where(s.lines.c.name.in_(names))
    found = dict(conn.execute(q).tuples().all())
    return {name: found.get(name) for name in names}


def line_head(repo: Repo, line: str) -> str | None:
    """The head of LINE, or None when there is no such line."""
    with repo.db.read() as conn:
        row = conn.execute(sa.select(s.lines.c.head).where(s.lines.c.name == line)).first()
    if row is None:
        return None
    if row.head is None:
        raise RevisionNotFound(line, "line has no commits")
    return row.head


def member_lines(conn, cid: str) -> list[str]:
    """The lines of the members of the set CID (none for an adapter)."""
    m, c = s.set_members.c, s.commits.c
    q = sa.select(c.line).join(s.set_members, m.member_id == c.id).where(m.commit_id == cid)
    return sorted(set(conn.execute(q).scalars()))
