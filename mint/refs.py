"""Names, revisions and refs. Every ref update is a compare-and-swap.

Revision syntax: LINE, LINE@TAG, LINE@CHANNEL, LINE@HEXPREFIX, REV~N, a full id or a unique
hex prefix of 7 or more characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mint import schema as s
from mint.db import is_unique_violation
from mint.errors import (
    AmbiguousRevision,
    InvalidName,
    RefConflict,
    RefExists,
    RevisionNotFound,
)
from mint.objects import CommitId, utcnow

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_HEX = re.compile(r"^[0-9a-f]{7,64}$")
_REV = re.compile(r"^(?P<base>[^~]+)(?P<tilde>(?:~\d*)*)$")
MIN_PREFIX = 7


def check_name(kind: str, name: str) -> str:
    """Line, tag and channel names: letters, digits, '.', '_' and '-', no '..'."""
    if not isinstance(name, str) or not name:
        raise InvalidName(kind, str(name), "it is empty")
    if not _NAME.match(name):
        raise InvalidName(
            kind, name, "use letters, digits, '.', '_' and '-' (no '/', '@', '~', spaces or control characters)"
        )
    if ".." in name or name.endswith((".", ".lock")):
        raise InvalidName(kind, name, "it may not contain '..' or end with '.' or '.lock'")
    return name


def is_hex_prefix(text: str) -> bool:
    return bool(_HEX.match(text))


@dataclass(frozen=True)
class Resolved:
    id: CommitId
    line: str | None  # the line named in the revision, if any
    ref: str | None  # the tag or channel named, if any
    ref_kind: str | None


def resolve(conn: Connection, rev: str) -> Resolved:
    """Resolve any revision form to one commit id, or raise RevisionNotFound/AmbiguousRevision."""
    m = _REV.match(rev.strip()) if isinstance(rev, str) else None
    if not m:
        raise RevisionNotFound(str(rev), "malformed revision")
    resolved = _resolve_base(conn, m.group("base"), rev)
    steps = sum(int(t) if t else 1 for t in m.group("tilde").split("~")[1:])
    commit = resolved.id
    for _ in range(steps):
        parent = conn.execute(
            sa.select(s.commit_parents.c.parent_id).where(
                s.commit_parents.c.commit_id == commit, s.commit_parents.c.idx == 0
            )
        ).scalar()
        if parent is None:
            raise RevisionNotFound(rev, f"{commit[:12]} has no parent")
        commit = parent
    return Resolved(CommitId(commit), resolved.line, resolved.ref if not steps else None, resolved.ref_kind if not steps else None)


def _resolve_base(conn: Connection, base: str, rev: str) -> Resolved:
    if "@" in base:
        line, _, name = base.partition("@")
        if not line or not name:
            raise RevisionNotFound(rev, "malformed revision")
        row = conn.execute(
            sa.select(s.refs.c.target, s.refs.c.kind).where(s.refs.c.line == line, s.refs.c.name == name)
        ).first()
        if row:
            return Resolved(CommitId(row.target), line, name, row.kind)
        if is_hex_prefix(name):
            return Resolved(_by_prefix(conn, name, rev, line=line), line, None, None)
        if _line_row(conn, line) is None:
            raise RevisionNotFound(rev, "unknown line")
        raise RevisionNotFound(rev, f"line {line} has no tag or channel {name!r}")
    row = _line_row(conn, base)
    if row is not None:
        if row.head is None:
            raise RevisionNotFound(rev, "line has no commits")
        return Resolved(CommitId(row.head), base, None, None)
    if is_hex_prefix(base):
        return Resolved(_by_prefix(conn, base, rev), None, None, None)
    raise RevisionNotFound(rev)


def _by_prefix(conn: Connection, prefix: str, rev: str, line: str | None = None) -> CommitId:
    # A range on the primary key, so the lookup is one index probe in both databases.
    q = sa.select(s.commits.c.id).where(s.commits.c.id >= prefix, s.commits.c.id < prefix + "g")
    if line is not None:
        q = q.where(s.commits.c.line == line)
    ids = [r[0] for r in conn.execute(q.order_by(s.commits.c.id).limit(5))]
    if not ids:
        raise RevisionNotFound(rev)
    if len(ids) > 1:
        raise AmbiguousRevision(rev, ids)
    return CommitId(ids[0])


def _line_row(conn: Connection, name: str):
    return conn.execute(sa.select(s.lines).where(s.lines.c.name == name)).first()


def line_row(conn: Connection, name: str):
    return _line_row(conn, name)


# --- line heads --------------------------------------------------------------


def advance_head(conn: Connection, line: str, kind: str, expected: str | None, new: str) -> None:
    """Move LINE's head from `expected` to `new`, creating the line on its first commit."""
    if expected is None:
        try:
            with conn.begin_nested():
                conn.execute(
                    s.lines.insert().values(
                        name=line, kind=kind, head=new, commit_count=1, created_at=utcnow()
                    )
                )
            return
        except sa.exc.IntegrityError as exc:
            if not is_unique_violation(exc):
                raise
            found = _line_row(conn, line)
            raise RefConflict(f"line {line}", None, found.head if found else None) from None
    result = conn.execute(
        s.lines.update()
        .where(s.lines.c.name == line, s.lines.c.head == expected)
        .values(head=new, commit_count=s.lines.c.commit_count + 1)
    )
    if result.rowcount != 1:
        found = _line_row(conn, line)
        raise RefConflict(f"line {line}", expected, found.head if found else None)


# --- tags and channels -------------------------------------------------------


def get_ref(conn: Connection, line: str, name: str):
    return conn.execute(
        sa.select(s.refs).where(s.refs.c.line == line, s.refs.c.name == name)
    ).first()


def set_ref(
    conn: Connection,
    *,
    line: str,
    name: str,
    kind: str,
    expected: str | None,
    new: str,
    by: str,
    action: str,
    message: str | None = None,
    reason: str | None = None,
    contract: str | None = None,
    evaluations: list | None = None,
    back: int | None = None,
    expected_entry: int | None = None,
) -> int:
    """Point LINE@NAME at `new` if it still points at `expected`; log the move. Returns the
    history entry's id. `expected=None` means the ref must not exist yet."""
    now = utcnow()
    entry = conn.execute(
        s.ref_history.insert().values(
            line=line, name=name, kind=kind, action=action, old=expected, new=new, by=by, at=now,
            reason=reason, contract=contract, evaluations=evaluations, back=back,
        )
    ).inserted_primary_key[0]
    values = dict(target=new, kind=kind, message=message, updated_at=now, entry=entry)
    if expected is None:
        try:
            with conn.begin_nested():
                conn.execute(s.refs.insert().values(line=line, name=name, **values))
        except sa.exc.IntegrityError as exc:
            if not is_unique_violation(exc):
                raise
            found = get_ref(conn, line, name)
            raise RefConflict(f"{line}@{name}", None, found.target if found else None) from None
        return entry
    cond = [s.refs.c.line == line, s.refs.c.name == name, s.refs.c.target == expected]
    if expected_entry is not None:
        cond.append(s.refs.c.entry == expected_entry)
    if conn.execute(s.refs.update().where(*cond).values(**values)).rowcount != 1:
        found = get_ref(conn, line, name)
        raise RefConflict(f"{line}@{name}", expected, found.target if found else None)
    return entry


def delete_ref(conn: Connection, *, line: str, name: str, expected: str, by: str) -> None:
    result = conn.execute(
        s.refs.delete().where(s.refs.c.line == line, s.refs.c.name == name, s.refs.c.target == expected)
    )
    if result.rowcount != 1:
        raise RefConflict(f"{line}@{name}", expected, None)
    conn.execute(
        s.ref_history.insert().values(
            line=line, name=name, kind="tag", action="delete", old=expected, new=None, by=by, at=utcnow()
        )
    )


def ensure_ref_kind(conn: Connection, line: str, name: str, kind: str) -> None:
    """A tag and a channel of one line may not share a name."""
    row = get_ref(conn, line, name)
    if row is not None and row.kind != kind:
        raise RefExists(f"{line}@{name} is a {row.kind}, not a {kind}")
