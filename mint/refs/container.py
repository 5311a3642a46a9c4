"""The refs container: line heads, tags and channels, moved only by compare-and-swap.

Like dulwich's `RefsContainer.set_if_equals`, every move names what the ref must hold now and
what it will hold; a move that finds something else raises RefConflict and changes nothing.
Each move of a tag or channel appends one row to `ref_history` (the reflog: who, when, how,
from, to) and returns its id, so that callers can attach their evidence to that row.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mint import schema as s
from mint.db import insert_new
from mint.errors import RefConflict
from mint.ids import Action, Kind, RefKind, utcnow


@dataclass(frozen=True)
class Ref:
    line: str
    name: str
    kind: RefKind
    target: str
    entry: int | None  # the ref_history row of the move that set it
    message: str | None
    updated_at: object


class RefsContainer:
    """The refs of one database transaction."""

    def __init__(self, conn: Connection):
        self.conn = conn

    # --- line heads ---------------------------------------------------------

    def head(self, line: str) -> str | None:
        return self.conn.execute(sa.select(s.lines.c.head).where(s.lines.c.name == line)).scalar()

    def create_line(self, line: str, kind: Kind) -> bool:
        """Make LINE, of KIND, with no commit yet (what the Hub's create_repo makes); False
        when it exists. Its first commit moves its head from None, as a new line's does."""
        row = dict(name=line, kind=kind, head=None, commit_count=0, created_at=utcnow())
        return insert_new(self.conn, s.lines, row)

    def _first(self, line: str, kind: Kind, new: str, count) -> None:
        """LINE's first head, NEW: a new line, or one made without a commit (`create_line`)."""
        row = dict(name=line, kind=kind, head=new, commit_count=count, created_at=utcnow())
        c = s.lines.c
        if insert_new(self.conn, s.lines, row):
            return
        q = s.lines.update().where(c.name == line, c.head.is_(None))
        if self.conn.execute(q.values(head=new, commit_count=count)).rowcount != 1:
            raise RefConflict(f"line {line}", None, self.head(line))

    def advance_head(self, line: str, kind: Kind, old: str | None, new: str) -> None:
        """Move LINE's head from OLD to NEW; OLD None creates the line with its first commit
        (or gives a line made without one its first)."""
        if old is None:
            return self._first(line, kind, new, 1)
        moved = self.conn.execute(
            s.lines.update()
            .where(s.lines.c.name == line, s.lines.c.head == old)
            .values(head=new, commit_count=s.lines.c.commit_count + 1)
        ).rowcount
        if moved != 1:
            raise RefConflict(f"line {line}", old, self.head(line))

    def move_head(
        self, line: str, kind: Kind, old: str | None, new: str, *, by: str, action: Action
    ) -> int:
        """Move LINE's head from OLD (None: the line is new) to NEW, as a push or fetch does,
        and log the move in ref_history. The line's commit count becomes the number of its
        commits here (a push brings many at once). Returns the history row's id."""
        count = sa.select(sa.func.count()).where(s.commits.c.line == line).scalar_subquery()
        if old is None:
            self._first(line, kind, new, count)
        else:
            moved = self.conn.execute(
                s.lines.update()
                .where(s.lines.c.name == line, s.lines.c.head == old)
                .values(head=new, commit_count=count)
            ).rowcount
            if moved != 1:
                raise RefConflict(f"line {line}", old, self.head(line))
        return self._log(line, "HEAD", RefKind.HEAD, action, old, new, by, utcnow())

    def retract_head(self, line: str, new: str, old: str | None) -> bool:
        """Undo a head move this process made: LINE back from NEW to OLD (None: remove the
        line), if it is still at NEW. False when someone moved it since."""
        c = s.lines.c
        if old is None:
            q = s.lines.delete().where(c.name == line, c.head == new, c.commit_count == 1)
        else:
            q = (
                s.lines.update()
                .where(c.name == line, c.head == new)
                .values(head=old, commit_count=c.commit_count - 1)
            )
        return self.conn.execute(q).rowcount == 1

    # --- tags and channels ----------------------------------------------------

    def get(self, line: str, name: str) -> Ref | None:
        row = self.conn.execute(
            sa.select(s.refs).where(s.refs.c.line == line, s.refs.c.name == name)
        ).first()
        return None if row is None else ref_of(row)

    def set_if_equals(
        self,
        line: str,
        name: str,
        old: Ref | None,
        new: str,
        *,
        kind: RefKind,
        by: str,
        action: Action,
        message: str | None = None,
        at=None,
        evidence: dict | None = None,
    ) -> int:
        """Point LINE@NAME at NEW if it still is OLD (None: it must not exist). Returns the
        history row's id. AT is the move's time (now, unless given); EVIDENCE, more columns
        of its history row (a promote's contract, evaluations, reason and back), written in
        the same insert."""
        now = at or utcnow()
        old_target = old.target if old else None
        log = dict(line=line, name=name, kind=kind, action=action, old=old_target, new=new)
        log.update(by=by, at=now, **(evidence or {}))
        values = dict(target=new, kind=kind, message=message, updated_at=now)
        if old is not None and self.conn.dialect.name == "postgresql":
            return self._log_and_swap(old, log, values)
        entry = self._log(**log)
        values["entry"] = entry
        if old is None:
            if not insert_new(self.conn, s.refs, dict(line=line, name=name, **values)):
                raise RefConflict(f"{line}@{name}", None, self._target(line, name))
            return entry
        moved = self.conn.execute(_swap(old.entry is not None), values | _was(old)).rowcount
        if moved != 1:
            raise RefConflict(f"{line}@{name}", old.target, self._target(line, name))
        return entry

    def _log_and_swap(self, old: Ref, log: dict, values: dict) -> int:
        """`set_if_equals` of an existing ref on PostgreSQL: the history row's insert and the
        compare-and-swap in one statement (a data-modifying WITH), one round trip instead of
        two. When the swap finds another target, the row inserted is rolled back with the
        transaction the raised RefConflict ends."""
        q = _log_and_swap(tuple(log), old.entry is not None)
        params = {f"h_{k}": v for k, v in log.items()} | {f"v_{k}": v for k, v in values.items()}
        moved = self.conn.execute(q, params | _was(old)).scalar()
        if moved is None:
            now = self._target(old.line, old.name)
            raise RefConflict(f"{old.line}@{old.name}", old.target, now)
        return moved

    def remove_if_equals(self, old: Ref, *, by: str) -> int:
        """Delete the ref if it still is OLD; log the deletion. Returns the history row's id."""
        ref = s.refs.c
        gone = self.conn.execute(
            s.refs.delete().where(
                ref.line == old.line, ref.name == old.name, ref.target == old.target
            )
        ).rowcount
        if gone != 1:
            raise RefConflict(
                f"{old.line}@{old.name}", old.target, self._target(old.line, old.name)
            )
        return self._log(
            old.line, old.name, old.kind, Action.DELETE, old.target, None, by, utcnow()
        )

    def log_event(
        self, line: str, name: str, kind: RefKind, action: Action, old, new, *, by: str, reason
    ) -> int:
        """Append a history row for something that happened to LINE@NAME without moving a
        ref (a canary started or stopped). Returns the row's id."""
        entry = self._log(line, name, kind, action, old, new, by, utcnow())
        h = s.ref_history.c
        self.conn.execute(s.ref_history.update().where(h.id == entry).values(reason=reason))
        return entry

    # --- internals --------------------------------------------------------------

    def _target(self, line: str, name: str) -> str | None:
        found = self.get(line, name)
        return found.target if found else None

    def _log(self, line, name, kind, action, old, new, by, at, **more) -> int:
        row = dict(line=line, name=name, kind=kind, action=action, old=old, new=new, by=by, at=at)
        row.update(more)
        return self.conn.execute(s.ref_history.insert(), row).inserted_primary_key[0]


def ref_of(row) -> Ref:
    """A refs row (or any row with its columns) as a Ref."""
    return Ref(
        row.line,
        row.name,
        RefKind(row.kind),
        row.target,
        row.entry,
        row.message,
        row.updated_at,
    )


@functools.cache
def _swap(entry_known: bool):
    """The compare-and-swap (`_was`): an UPDATE of the ref W_LINE@W_NAME that matches only
    while it still holds W_TARGET, set by the history entry W_ENTRY (by none: not
    ENTRY_KNOWN). Built once; the values to set are bound beside."""
    ref, bound = s.refs.c, sa.bindparam
    q = s.refs.update().where(ref.line == bound("w_line"), ref.name == bound("w_name"))
    q = q.where(ref.target == bound("w_target"))
    return q.where(ref.entry == bound("w_entry") if entry_known else ref.entry.is_(None))


def _was(old: Ref) -> dict:
    """`_swap`'s parameters for a ref that must still be OLD."""
    was = dict(w_line=old.line, w_name=old.name, w_target=old.target)
    return was if old.entry is None else was | {"w_entry": old.entry}


@functools.cache
def _log_and_swap(keys: tuple[str, ...], entry_known: bool):
    """`_swap` that sets the ref to the bound V_TARGET, V_KIND, V_MESSAGE, V_UPDATED_AT and the
    id of the history row it inserts (its KEYS bound as H_KEY) in the same statement."""
    h, ref = s.ref_history, s.refs.c
    row = {k: sa.bindparam(f"h_{k}", type_=h.c[k].type) for k in keys}
    logged = h.insert().values(row).returning(h.c.id).cte("logged")
    values = {k: sa.bindparam(f"v_{k}", type_=ref[k].type) for k in _SET}
    values["entry"] = sa.select(logged.c.id).scalar_subquery()
    return _swap(entry_known).values(values).returning(ref.entry).add_cte(logged)


_SET = ("target", "kind", "message", "updated_at")  # what a move sets, beside the entry
