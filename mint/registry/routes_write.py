"""Writes: tags, contracts, evaluations, approvals and channel moves. Every write records the
token's name as who acted; a request cannot name another identity."""

from __future__ import annotations

import tempfile
from pathlib import Path

from fastapi import APIRouter

from mint import api, objects
from mint.registry import queries
from mint.registry.auth import (
    Admin,
    Maintainer,
    RepoDep,
    Writer,
    check_line,
    check_move,
    check_rev,
    need,
)
from mint.registry.models import (
    ApprovalBody,
    ContractBody,
    EvaluationBody,
    Name,
    PromoteBody,
    RollbackBody,
    TagBody,
    Text,
)
from mint.registry.render import MintJSON, answer
from mint.registry.schemas import ERROR_RESPONSES, model_of
from mint.signing.moves import MoveStatement
from mint.team.tokens import Access

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES, tags=["writes"])


@router.post("/tags", response_model=model_of(objects.RefInfo))
def tag(repo: RepoDep, who: Writer, body: TagBody) -> MintJSON:
    if body.force:
        need(who, Access.MAINTAINER, "move a tag")
    check_rev(repo, who, body.rev)
    if "@" in body.tag:
        check_line(who, body.tag.partition("@")[0])
    result = api.tag(repo, body.tag, body.rev, by=who.name, message=body.message, force=body.force)
    return answer(result)


@router.delete("/tags/{line:path}/{tag}", response_model=model_of(objects.RefInfo))
def tag_delete(repo: RepoDep, who: Maintainer, line: Name, tag: Name) -> MintJSON:
    check_line(who, line)
    return answer(api.tag_delete(repo, f"{line}@{tag}", by=who.name))


@router.post("/contracts", response_model=model_of(objects.ContractAdded))
def contract_add(repo: RepoDep, who: Admin, body: ContractBody) -> MintJSON:
    # The operation reads a file; the name is what its messages show.
    with tempfile.TemporaryDirectory(prefix="mint-contract-") as folder:
        path = Path(folder) / "contract.toml"
        path.write_text(body.source, encoding="utf-8", errors="surrogatepass")
        return answer(api.contract_add(repo, path, by=who.name))


@router.post("/evaluations", response_model=model_of(objects.Evaluation))
def record_evaluation(repo: RepoDep, who: Writer, body: EvaluationBody) -> MintJSON:
    check_rev(repo, who, body.rev)
    ev = api.record_evaluation(
        repo,
        body.rev,
        body.contract,
        body.metrics,
        source=body.source,
        evaluator=body.evaluator,
        data_hash=body.data_hash,
        by=who.name,
    )
    return answer(api.evaluation_checks(repo, ev))


@router.post("/approvals", response_model=model_of(objects.Approval))
def approve(repo: RepoDep, who: Maintainer, body: ApprovalBody) -> MintJSON:
    check_rev(repo, who, body.rev)
    return answer(api.approve(repo, body.rev, body.channel, by=who.name))


class PromoteCreateBody(PromoteBody):
    create: bool = False  # a new channel a typo's distance from a known one: yes, make it
    signature: Text | None = None  # a signed move statement's bundle, made by the client


class RollbackSignedBody(RollbackBody):
    signature: Text | None = None


@router.post("/promote", response_model=model_of(objects.Move))
def promote(repo: RepoDep, who: Writer, body: PromoteCreateBody) -> MintJSON:
    line = queries.line_of(repo, body.rev)
    check_move(repo, who, line, body.channel, force=body.force)
    return answer(api.promote(repo, **_promote_args(body, who), signature=body.signature))


def _promote_args(body: PromoteCreateBody, who) -> dict:
    return dict(
        rev=body.rev,
        channel=body.channel,
        by=who.name,
        contract=body.contract,
        force=body.force,
        reason=body.reason,
        create=body.create,
    )


@router.post("/rollback", response_model=model_of(objects.Move))
def rollback(repo: RepoDep, who: Writer, body: RollbackSignedBody) -> MintJSON:
    line, _, channel = body.ref.partition("@")
    check_move(repo, who, line, channel, force=False)
    move = api.rollback(
        repo, body.ref, by=who.name, to=body.to, reason=body.reason, signature=body.signature
    )
    return answer(move)


# The statement a move would be signed with (nothing moves): a client signs it with its key,
# which never leaves it, and sends the bundle with the move, checked against the move made.


@router.post("/promote/statement", response_model=model_of(MoveStatement) | None)
def promote_statement(repo: RepoDep, who: Writer, body: PromoteCreateBody) -> MintJSON:
    from mint.gates.signed import move_statement

    line = queries.line_of(repo, body.rev)
    check_move(repo, who, line, body.channel, force=body.force)
    return answer(move_statement(repo, "promote", **_promote_args(body, who)))


@router.post("/rollback/statement", response_model=model_of(MoveStatement) | None)
def rollback_statement(repo: RepoDep, who: Writer, body: RollbackSignedBody) -> MintJSON:
    from mint.gates.signed import move_statement

    line, _, channel = body.ref.partition("@")
    check_move(repo, who, line, channel, force=False)
    move = dict(ref=body.ref, by=who.name, to=body.to, reason=body.reason)
    return answer(move_statement(repo, "rollback", **move))


@router.delete("/channels/{line:path}/{channel}", response_model=model_of(objects.Move))
def channel_rm(repo: RepoDep, who: Maintainer, line: Name, channel: Name) -> MintJSON:
    # A maintainer's, as deleting a tag; the operation refuses a protected channel.
    check_line(who, line)
    return answer(api.channel_rm(repo, f"{line}@{channel}", by=who.name))
