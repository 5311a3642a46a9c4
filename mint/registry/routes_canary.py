"""Canaries: read a channel's canary and its live numbers (reader); start and stop one, which
takes the role that moving the channel takes (as promote: writer, or a protected channel's
role). The registry records the token's name as who started or stopped it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import Field

from mint import api, objects
from mint.ids import CanaryOutcome
from mint.registry.auth import Reader, RepoDep, Writer, check_line, check_move, check_rev
from mint.registry.models import Body, Rev, Text
from mint.registry.render import MintJSON, answer
from mint.registry.schemas import ERROR_RESPONSES, model_of
from mint.registry.tokens import Identity
from mint.repo import Repo

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES, tags=["canaries"])

RefQuery = Annotated[Rev, Query(description="LINE@CHANNEL")]


class CanaryStartBody(Body):
    ref: Rev  # LINE@CHANNEL
    candidate: Rev
    fraction: Annotated[float, Field(gt=0, lt=1)]
    reason: Text | None = None


class CanaryStopBody(Body):
    ref: Rev  # LINE@CHANNEL
    reason: Text | None = None
    outcome: CanaryOutcome = CanaryOutcome.STOPPED


def check_channel(repo: Repo, who: Identity, ref: str) -> None:
    """Starting or stopping REF's canary needs what moving REF needs (never force)."""
    line, _, channel = ref.partition("@")
    check_move(repo, who, line, channel, force=False)


@router.get("/canary", response_model=model_of(objects.Canary) | None)
def canary_of(repo: RepoDep, who: Reader, ref: RefQuery) -> MintJSON:
    """The open canary of LINE@CHANNEL, or null."""
    check_line(who, ref.partition("@")[0])
    return answer(api.canary_of(repo, ref))


@router.get("/canary/status", response_model=model_of(objects.CanaryStatus))
def canary_status(repo: RepoDep, who: Reader, ref: RefQuery) -> MintJSON:
    check_line(who, ref.partition("@")[0])
    return answer(api.canary_status(repo, ref))


@router.post("/canary/start", response_model=model_of(objects.Canary))
def canary_start(repo: RepoDep, who: Writer, body: CanaryStartBody) -> MintJSON:
    check_channel(repo, who, body.ref)
    check_rev(repo, who, body.candidate)
    canary = api.canary_start(
        repo, body.ref, body.candidate, body.fraction, by=who.name, reason=body.reason
    )
    return answer(canary)


@router.post("/canary/stop", response_model=model_of(objects.Canary))
def canary_stop(repo: RepoDep, who: Writer, body: CanaryStopBody) -> MintJSON:
    check_channel(repo, who, body.ref)
    canary = api.canary_stop(repo, body.ref, by=who.name, reason=body.reason, outcome=body.outcome)
    return answer(canary)
