"""`GET /api/v1/channel`: everything the channel page shows, as JSON: the holder, the line's
head against the channel's gate, a page of moves newest first with the evidence of each (its
evaluations and their metric table as the gate saw it, and the approvals it had), and the
pending approvals."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import APIRouter, Query

from mint import api
from mint.ids import RefKind
from mint.objects import Check, Evaluation, GateReport, Move
from mint.registry.auth import Reader, RepoDep, check_line
from mint.registry.models import Rev
from mint.registry.render import MintJSON, answer
from mint.registry.schemas import ERROR_RESPONSES, model_of
from mint.registry.web import evidence
from mint.registry.web.approvals import PendingApproval, pending_approvals, split_ref
from mint.repo import Repo
from mint.team.tokens import Identity

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES, tags=["reads"])
MOVES = 20
LAST_ENTRY = 2**31 - 1  # the largest history entry id (an INTEGER column)


@dataclass(frozen=True)
class Evidence:
    """One evaluation a move rested on, with its metric checks against the replaced holder."""

    evaluation: Evaluation
    checks: list[Check]


@dataclass(frozen=True)
class Approved:
    """An approval a promote had: who gave it, and when."""

    by: str
    at: str


@dataclass(frozen=True)
class TimelineEntry:
    move: Move
    evidence: list[Evidence]
    approvals: list[Approved]  # of the moved-to commit for the channel, up to the move
    # A promote's or force's other gate rows (a missing evaluation, requires, approvals)
    gate: list[Check] = field(default_factory=list)


@dataclass(frozen=True)
class ChannelView:
    line: str
    channel: str
    holder: str | None
    head: str
    gate: GateReport | None  # the head against the channel, when the head does not hold it
    moves: list[TimelineEntry]  # newest first
    older: int | None  # `before` for the next (older) page; None: this page is the oldest
    pending: list[PendingApproval]


def timeline(repo: Repo, moves: list[Move]) -> list[TimelineEntry]:
    """MOVES, each with the evidence it rests on."""
    cache: dict = {}  # evaluations and contracts read so far
    gates, approved = evidence.gate_rows(repo, moves, cache), evidence.approvals_of(repo, moves)
    return [
        TimelineEntry(
            m,
            [Evidence(e, c) for e, c in evidence.of_move(repo, m, cache)],
            [Approved(by, at) for by, at in approved.get(m.id, [])],
            gates.get(m.id, []),
        )
        for m in moves
    ]


def channel_view(
    repo: Repo, who: Identity, ref: str, n: int = MOVES, before: int | None = None
) -> ChannelView:
    """LINE@CHANNEL as its page shows it: a page of N moves (before the entry BEFORE)."""
    line, channel = split_ref(ref)
    check_line(who, line)
    if before is not None:  # no entry is later; a larger number overflows the column's type
        before = min(before, LAST_ENTRY)
    moves = list(reversed(api.history(repo, ref, n=n, before=before)))
    holder = next(
        (c.target for c in api.tag_list(repo, line, RefKind.CHANNEL) if c.name == channel), None
    )
    head = api.resolve(repo, line)
    return ChannelView(
        line,
        channel,
        holder,
        head,
        api.gate(repo, head, channel) if head != holder else None,
        timeline(repo, moves),
        moves[-1].id if len(moves) == n else None,
        pending_approvals(repo, ref, 20),
    )


@router.get("/channel", response_model=model_of(ChannelView))
def channel(
    repo: RepoDep,
    who: Reader,
    ref: Annotated[Rev, Query(description="LINE@CHANNEL")],
    n: Annotated[int, Query(ge=1, le=1000, description="moves on the page")] = MOVES,
    before: Annotated[
        int | None, Query(ge=0, le=2**62, description="moves before this entry")
    ] = None,
) -> MintJSON:
    return answer(channel_view(repo, who, ref, n, before))
