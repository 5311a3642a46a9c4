"""Canaries: read a channel's canary and its live numbers (reader); start and stop one, which
takes the role that moving the channel takes (as promote: writer, or a protected channel's
role). A start also passes the candidate's gate for the channel, checked by the same
`canary_start` as locally; forcing it past the gate takes what forcing a promote takes
(admin on a protected channel). The registry records the token's name as who started or
stopped it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import Field

from mint import api, objects
from mint.ids import CanaryOutcome
from mint.registry.auth import Reader, RepoDep, Writer, check_line, check_move, check_rev
from mint.registry.models import Body, Name, Rev, Text
from mint.registry.render import MintJSON, answer
from mint.registry.schemas import ERROR_RESPONSES, model_of
from mint.repo import Repo
from mint.signing.moves import MoveStatement
from mint.team.tokens import Identity

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES, tags=["canaries"])

RefQuery = Annotated[Rev, Query(description="LINE@CHANNEL")]


class CanaryStartBody(Body):
    ref: Rev  # LINE@CHANNEL
    candidate: Rev
    fraction: Annotated[float, Field(gt=0, lt=1)]
    reason: Text | None = None
    contract: Name | None = None  # also apply this contract, as promote's does
    force: bool = False  # past a refusing gate (needs a reason; admin on a protected channel)
    signature: Text | None = None  # a signed statement of the start's, made by the client


class CanaryStopBody(Body):
    ref: Rev  # LINE@CHANNEL
    reason: Text | None = None
    outcome: CanaryOutcome = CanaryOutcome.STOPPED
    signature: Text | None = None  # a signed statement of the stop's, made by the client


def check_channel(repo: Repo, who: Identity, ref: str, *, force: bool = False) -> None:
    """Starting or stopping REF's canary needs what moving REF needs; forcing one past its
    gate needs what forcing a promote needs (admin on a protected channel)."""
    line, _, channel = ref.partition("@")
    check_move(repo, who, line, channel, force=force)


@router.get("/canary", response_model=model_of(objects.Canary) | None)
def canary_of(repo: RepoDep, who: Reader, ref: RefQuery) -> MintJSON:
    """The open canary of LINE@CHANNEL, or null."""
    check_line(who, ref.partition("@")[0])
    return answer(api.canary_of(repo, ref))


@router.get("/canary/status", response_model=model_of(objects.CanaryStatus))
def canary_status(
    repo: RepoDep,
    who: Reader,
    ref: RefQuery,
    contract: Annotated[Name | None, Query(description="judge under its [live]")] = None,
) -> MintJSON:
    check_line(who, ref.partition("@")[0])
    return answer(api.canary_status(repo, ref, contract=contract))


@router.post("/canary/start", response_model=model_of(objects.Canary))
def canary_start(repo: RepoDep, who: Writer, body: CanaryStartBody) -> MintJSON:
    """Start a canary; on a channel protected as signed, with the signed statement of this
    start (`POST /canary/start/statement` plans it)."""
    check_channel(repo, who, body.ref, force=body.force)
    check_rev(repo, who, body.candidate)
    return answer(api.canary_start(repo, **_start_args(body, who), signature=body.signature))


def _start_args(body: CanaryStartBody, who: Identity) -> dict:
    return dict(
        ref=body.ref,
        candidate=body.candidate,
        fraction=body.fraction,
        by=who.name,
        reason=body.reason,
        contract=body.contract,
        force=body.force,
    )


@router.post("/canary/stop", response_model=model_of(objects.Canary))
def canary_stop(repo: RepoDep, who: Writer, body: CanaryStopBody) -> MintJSON:
    check_channel(repo, who, body.ref)
    stop = dict(by=who.name, reason=body.reason, outcome=body.outcome)
    return answer(api.canary_stop(repo, body.ref, **stop, signature=body.signature))


# The statement a canary's start or stop would be signed with (nothing changes): a client
# signs it with its key, which never leaves it, as it signs a promote's.


@router.post("/canary/start/statement", response_model=model_of(MoveStatement) | None)
def canary_start_statement(repo: RepoDep, who: Writer, body: CanaryStartBody) -> MintJSON:
    from mint.gates.signed import move_statement

    check_channel(repo, who, body.ref, force=body.force)
    check_rev(repo, who, body.candidate)
    return answer(move_statement(repo, "canary-start", **_start_args(body, who)))


@router.post("/canary/stop/statement", response_model=model_of(MoveStatement) | None)
def canary_stop_statement(repo: RepoDep, who: Writer, body: CanaryStopBody) -> MintJSON:
    from mint.gates.signed import move_statement

    check_channel(repo, who, body.ref)
    stop = dict(ref=body.ref, by=who.name, reason=body.reason, outcome=body.outcome)
    return answer(move_statement(repo, "canary-stop", **stop))
