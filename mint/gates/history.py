"""What held each channel when: the audit trail, and the state of every line."""

from __future__ import annotations

import sqlalchemy as sa

from mint import schema as s
from mint.errors import RevisionNotFound
from mint.ids import Action, Kind, RefKind, iso
from mint.objects import LineStatus, Move
from mint.repo import Repo


def move_of(conn, entry_id: int) -> Move:
    """The history row ENTRY_ID as a Move."""
    row = conn.execute(sa.select(s.ref_history).where(s.ref_history.c.id == entry_id)).one()
    return _as_move(row)


def _as_move(r) -> Move:
    return Move(
        r.id,
        iso(r.at),
        Action(r.action),
        r.line,
        r.name,
        r.old,
        r.new,
        r.by,
        r.reason,
        r.contract,
        r.evaluations or [],
    )


def history(repo: Repo, ref: str) -> list[Move]:
    """Every move of LINE@CHANNEL, oldest first. History is never edited or deleted."""
    line, _, channel = ref.partition("@")
    if not line or not channel:
        raise RevisionNotFound(ref, "expected LINE@CHANNEL")
    h = s.ref_history.c
    with repo.db.read() as conn:
        q = sa.select(s.ref_history).where(
            h.line == line, h.name == channel, h.kind == RefKind.CHANNEL
        )
        moves = [_as_move(r) for r in conn.execute(q.order_by(h.id))]
    if not moves:
        raise RevisionNotFound(ref, "unknown channel")
    return moves


def status(repo: Repo) -> list[LineStatus]:
    """Every line with its head and the holder of each of its channels."""
    with repo.db.read() as conn:
        channels: dict[str, dict[str, str]] = {}
        for r in conn.execute(sa.select(s.refs).where(s.refs.c.kind == RefKind.CHANNEL)):
            channels.setdefault(r.line, {})[r.name] = r.target
        lines = conn.execute(sa.select(s.lines).order_by(s.lines.c.name))
        return [
            LineStatus(
                r.name, Kind(r.kind), r.head, dict(sorted(channels.get(r.name, {}).items()))
            )
            for r in lines
        ]
