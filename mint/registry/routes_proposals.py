"""Proposals (`mint.proposals`): a commit offered to a line, listed, shown with its gates,
merged by a writer of the line or closed. The Hub's pull requests are the same proposals
(`hub_proposals`); this is mint's own API, which `mint proposal` and `mint commit --propose`
use through a registry."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import Field

from mint import api, objects
from mint.exchange import receiving
from mint.proposals import open_received
from mint.registry.auth import Contributor, Reader, RepoDep, Writer, check_commit, check_line, need
from mint.registry.models import Body, Id64, Name
from mint.registry.render import MintJSON, answer
from mint.registry.schemas import ERROR_RESPONSES, list_of, model_of
from mint.team.tokens import Access

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES, tags=["proposals"])


class ProposalBody(Body):
    """A commit in the wire form of `mint.exchange.wire` (its blobs stored already), offered to
    its line: BASE, the line's head it is proposed on; DESCRIPTION, what it is for."""

    commit: dict[str, Any]
    base: Id64 | None = None
    description: Annotated[str, Field(max_length=64 * 1024)] = ""


@router.post("/proposals", response_model=model_of(objects.Proposal))
def propose(repo: RepoDep, who: Contributor, body: ProposalBody) -> MintJSON:
    """Record the commit (its id recomputed, checked as a push's are) and its proposal to its
    line, in one transaction; no head moves. A contributor's token proposes to its lines."""
    admission = receiving.Admission(
        by=who.name,
        check_line=lambda line: check_line(who, line),
        add_contracts=False,
        reads_line=who.may_touch if who.lines is not None else None,
    )
    cid, made = str(body.commit.get("id", "")), []

    def offer(conn, commits: list) -> None:
        made.append(open_received(conn, commits, cid, body.base, body.description, who.name))

    receiving.import_objects(
        repo, {"commits": [body.commit]}, pushed_by=who.name, admission=admission, also=offer
    )
    return answer(made[0])


@router.get("/proposals", response_model=list_of(objects.Proposal))
def proposals(
    repo: RepoDep,
    who: Reader,
    line: Annotated[Name | None, Query()] = None,
    status: Annotated[Name | None, Query()] = None,
) -> MintJSON:
    """Proposals of LINE (of every line the token may read, without), newest first."""
    if line is not None:
        check_line(who, line)
    found = api.proposal_ls(repo, line, status)
    return answer([p for p in found if who.may_touch(p.line)])


@router.get("/proposals/{line:path}/{number}", response_model=model_of(objects.ProposalDetail))
def proposal(repo: RepoDep, who: Reader, line: Name, number: int) -> MintJSON:
    """Proposal NUMBER of LINE: its diff against the head, evaluations and gates."""
    check_line(who, line)
    detail = api.proposal_show(repo, line, number)
    check_commit(repo, who, detail.proposal.commit_id)
    return answer(detail)


@router.post("/proposals/{line:path}/{number}/merge", response_model=model_of(objects.Proposal))
def merge(repo: RepoDep, who: Writer, line: Name, number: int) -> MintJSON:
    """Move LINE's head to the proposal's commit (fast-forward only), as a writer of LINE."""
    check_line(who, line)
    return answer(api.proposal_merge(repo, line, number, by=who.name))


@router.post("/proposals/{line:path}/{number}/close", response_model=model_of(objects.Proposal))
def close(repo: RepoDep, who: Contributor, line: Name, number: int) -> MintJSON:
    """Close the proposal unmerged: its proposer, or a writer of LINE."""
    check_line(who, line)
    found = api.proposal_show(repo, line, number).proposal
    if found.by != who.name:
        need(who, Access.WRITER, f"close another's proposal {number} of {line}")
    return answer(api.proposal_close(repo, line, number, by=who.name))
