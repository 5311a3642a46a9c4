"""What held each channel when: the audit trail, and the state of every line."""

from __future__ import annotations

import functools

import sqlalchemy as sa

from mint import schema as s
from mint.commits.rows import lines_page
from mint.errors import InvalidConfig, RevisionNotFound
from mint.ids import Action, Kind, RefKind, iso
from mint.objects import LineStatus, Move
from mint.refs import remote_refs
from mint.refs.revisions import near_refs
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


def history(
    repo: Repo, ref: str, *, n: int | None = None, before: int | None = None
) -> list[Move]:
    """Moves of LINE@CHANNEL, oldest first, with its canaries' starts and stops; history is
    never edited or deleted.

    Every move by default. With N, only the newest N moves (a page); with BEFORE (an entry
    id), only moves older than that entry. The page before a page P is `before=P[0].id`.
    Each page is one query on the (line, name, id) index, however long the history."""
    if n is not None and n < 1:
        raise InvalidConfig(f"a page of history holds 1 move or more, not {n}")
    line, _, channel = ref.partition("@")
    if not line or not channel:
        raise RevisionNotFound(ref, "expected LINE@CHANNEL")
    h = s.ref_history.c
    # A canary's start and stop are part of the channel's story (they move no ref).
    where = (h.line == line, h.name == channel, h.kind.in_([RefKind.CHANNEL, RefKind.CANARY]))
    with repo.db.read() as conn:
        q = sa.select(s.ref_history).where(*where)
        if before is not None:
            q = q.where(h.id < before)
        if n is None:
            moves = [_as_move(r) for r in conn.execute(q.order_by(h.id))]
        else:
            moves = [_as_move(r) for r in conn.execute(q.order_by(h.id.desc()).limit(n))][::-1]
        if not moves and (before is None or not _has_moves(conn, where)):
            raise RevisionNotFound(
                ref, "unknown channel", near_refs(conn, line, channel, RefKind.CHANNEL)
            )
    return moves


def _has_moves(conn, where) -> bool:
    q = sa.select(s.ref_history.c.id).where(*where).limit(1)
    return conn.execute(q).first() is not None


def status(repo: Repo, *, limit: int | None = None, after: str | None = None) -> list[LineStatus]:
    """Every line by name with its head and the holder of each of its channels; with LIMIT
    and AFTER (a line name), one page: the first LIMIT lines whose names sort after AFTER.

    One query on indexes, whatever the number of tags and commits: the lines (a range of the
    names' index) outer-joined to their channels (a probe of the channels' index each),
    which also says whether any remote-tracking ref exists; only then a second reads the
    range's remote-tracking channels."""
    q = _every_line() if limit is None and after is None else _status_query(limit, after)
    with repo.db.read(autocommit=True) as conn:
        rows = conn.execute(q).all()
        if not rows:
            return []
        tracked = remote_refs.tracked(conn, lines=(rows[0][0], rows[-1][0])) if rows[0][5] else []
    remote: dict[str, dict[str, str]] = {}
    for r in tracked:
        if r.kind == RefKind.CHANNEL:
            remote.setdefault(r.line, {})[f"{r.remote}/{r.name}"] = r.target
    return _line_statuses(rows, remote)


def _status_query(limit: int | None, after: str | None):
    """Lines (as `lines_page` pages them) with their channels, and whether any
    remote-tracking ref exists."""
    ln, ref = s.lines.c, s.refs.c
    page = lines_page(sa.select(ln.name, ln.kind, ln.head), limit, after).subquery()
    on = sa.and_(ref.kind == RefKind.CHANNEL, ref.line == page.c.name)
    # Any row (the first one read), as the driver gives it: a Boolean's conversion per row
    # cost more than the lookup.
    tracking = sa.type_coerce(sa.select(s.remote_refs.c.line).exists(), sa.Integer)
    q = sa.select(page.c.name, page.c.kind, page.c.head, ref.name, ref.target, tracking)
    return q.select_from(page.outerjoin(s.refs, on)).order_by(page.c.name, ref.name)


@functools.cache
def _every_line():
    """`_status_query` of every line, built once (it has no parameter)."""
    return _status_query(None, None)


def _line_statuses(rows, remote: dict) -> list[LineStatus]:
    """ROWS (line, kind, head, channel, holder, _), by line then channel, as LineStatus."""
    kinds = {k.value: k for k in Kind}
    out, last, held = [], None, {}
    for name, kind, head, channel, target, _ in rows:
        if name != last:
            held, last = {}, name
            out.append(LineStatus(name, kinds[kind], head, held, remote.get(name) or {}))
        if channel is not None:
            held[channel] = target
    return out
