"""Pending approvals of a channel: approvals recorded for commits of the line that no move has
used yet (the commit does not hold the channel, and has not come onto it since it was
approved: an approval a promote rested on is that move's evidence, not pending). The channel
page shows them; `GET /api/v1/approvals` answers the same as JSON, so nothing is only on the
page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import sqlalchemy as sa
from fastapi import APIRouter, Query

from mint import schema as s
from mint.errors import RevisionNotFound
from mint.gates.checks import channel_holder
from mint.ids import CommitId, RefKind, as_utc, iso
from mint.registry.auth import Reader, RepoDep, check_line
from mint.registry.models import Rev
from mint.registry.render import MintJSON, answer
from mint.registry.schemas import ERROR_RESPONSES, list_of
from mint.repo import Repo

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES, tags=["reads"])
LIMIT = 100


@dataclass(frozen=True)
class PendingApproval:
    """An approval of a commit for a channel that the commit does not hold (yet)."""

    commit_id: CommitId
    line: str
    channel: str
    by: str
    at: str


def split_ref(ref: str) -> tuple[str, str]:
    line, _, channel = ref.partition("@")
    if not line or not channel or "@" in channel:
        raise RevisionNotFound(ref, "expected LINE@CHANNEL")
    return line, channel


def pending_approvals(repo: Repo, ref: str, limit: int = LIMIT) -> list[PendingApproval]:
    """Approvals for LINE@CHANNEL no move has used, newest first: of commits other than its
    holder, recorded after the commit last came onto the channel, if it ever did.

    The channel's approvals are read newest first in slices, each slice's commits looked up
    by id: a channel's approvals are few beside a line's commits."""
    line, channel = split_ref(ref)
    a, c = s.approvals.c, s.commits.c
    out: list[PendingApproval] = []
    with repo.db.read() as conn:
        holder = channel_holder(conn, line, channel)
        q = sa.select(a.id, a.commit_id, a.by, a.at).where(a.channel == channel)
        last = None
        while len(out) < limit:
            page = q.where(a.id < last) if last is not None else q
            rows = conn.execute(page.order_by(a.id.desc()).limit(500)).all()
            if not rows:
                break
            ids = {r.commit_id for r in rows} - {holder}
            on_line = set(
                conn.execute(sa.select(c.id).where(c.id.in_(ids), c.line == line)).scalars()
            )
            came = _last_held(conn, line, channel, on_line)
            out += [
                PendingApproval(CommitId(r.commit_id), line, channel, r.by, iso(r.at))
                for r in rows
                if r.commit_id in on_line
                and (r.commit_id not in came or as_utc(r.at) > came[r.commit_id])
            ]
            last = rows[-1].id
    return out[:limit]


def _last_held(conn, line: str, channel: str, ids: set[str]) -> dict:
    """Commit -> when it last came onto LINE@CHANNEL, for those of IDS that ever did (by the
    index on line, name and new)."""
    if not ids:
        return {}
    h = s.ref_history.c
    q = (
        sa.select(h.new, sa.func.max(h.at))
        .where(h.line == line, h.name == channel, h.kind == RefKind.CHANNEL, h.new.in_(ids))
        .group_by(h.new)
    )
    return {new: as_utc(at) for new, at in conn.execute(q)}


def approved_at(repo: Repo, rev: str, channel: str, by: str) -> str | None:
    """When BY approved the commit REV (an id) for CHANNEL (None: they have not): a page offers
    no second approval."""
    a = s.approvals.c
    q = sa.select(a.at).where(a.commit_id == rev, a.channel == channel, a.by == by)
    with repo.db.read() as conn:
        at = conn.execute(q).scalar()
    return iso(at)


@router.get("/approvals", response_model=list_of(PendingApproval))
def approvals(
    repo: RepoDep,
    who: Reader,
    ref: Annotated[Rev, Query(description="LINE@CHANNEL")],
    limit: Annotated[int, Query(ge=1, le=1000, description="at most this many")] = LIMIT,
) -> MintJSON:
    line, _ = split_ref(ref)
    check_line(who, line)
    return answer(pending_approvals(repo, ref, limit))
