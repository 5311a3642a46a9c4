"""The ref log as events: each `ref_history` row (a ref moved, a canary started or stopped, a
channel's fleet diverged from its holder or converged on it) is one event, with its row id
as the event's id. The registry's event stream and its webhooks send these; webhooks filter
on `EVENT_TYPES`."""

from __future__ import annotations

import sqlalchemy as sa

from mint import schema as s
from mint.ids import Action, RefKind
from mint.repo import Repo

BATCH = 500  # rows read per look
TYPES = {RefKind.CHANNEL: "channel.moved", RefKind.TAG: "tag.moved", RefKind.HEAD: "line.pushed"}
CANARY_TYPES = {Action.CANARY_START: "canary.started", Action.CANARY_STOP: "canary.stopped"}
FLEET_TYPES = {
    Action.FLEET_DIVERGED: "fleet.diverged",
    Action.FLEET_CONVERGED: "fleet.converged",
}
# Every type an event may have (webhooks filter on these).
EVENT_TYPES = (*TYPES.values(), *CANARY_TYPES.values(), *FLEET_TYPES.values())


def rows_after(repo: Repo, after: int) -> list:
    """The next ref_history rows of REPO after id AFTER, oldest first (at most BATCH)."""
    t = s.ref_history
    q = sa.select(t).where(t.c.id > after).order_by(t.c.id).limit(BATCH)
    with repo.db.read() as conn:
        return list(conn.execute(q))


def last_id(repo: Repo) -> int:
    """The newest ref_history id of REPO (0 when there is none)."""
    with repo.db.read() as conn:
        return newest_id(conn)


def newest_id(conn) -> int:
    """`last_id` in the caller's transaction (CONN)."""
    return conn.execute(sa.select(sa.func.max(s.ref_history.c.id))).scalar() or 0


def event_of(row) -> dict:
    """The event a ref_history row is: {"id", "type", "at", "data"}."""
    at = row.at.isoformat() if hasattr(row.at, "isoformat") else str(row.at)
    data = {"line": row.line, "name": row.name, "from": row.old, "to": row.new}
    data |= {"action": row.action, "by": row.by}
    kind = TYPES.get(row.kind, "ref.moved")
    if row.kind == RefKind.CANARY:
        kind = CANARY_TYPES.get(row.action, "canary.stopped")
    if row.kind == RefKind.FLEET:  # which instances, and why, in one line
        kind, data["reason"] = FLEET_TYPES.get(row.action, "fleet.converged"), row.reason
    return {"id": row.id, "type": kind, "at": at, "data": data}
