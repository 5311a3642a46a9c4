"""Proposals on a registry: the same operations, signatures and results as `mint.proposals`.

The registry records the token's identity as who proposed, merged or closed, so `by=` is not
sent. A proposal itself is made by the porcelain's commit or set derive with `propose=`,
through `RemoteBackend.propose` (its blobs, then one request)."""

from __future__ import annotations

from mint.exchange.wire import decode, decode_list
from mint.objects import Proposal, ProposalDetail
from mint.remote.http import segment
from mint.remote.repo import RemoteRepo


def proposal_ls(
    repo: RemoteRepo, line: str | None = None, status: str | None = None
) -> list[Proposal]:
    """Proposals of LINE (every line's the token may read, without), newest first."""
    return decode_list(Proposal, repo.client.get("/proposals", line=line, status=status))


def proposal_show(repo: RemoteRepo, line: str, number: int) -> ProposalDetail:
    """Proposal NUMBER of LINE, its diff, evaluations and gates."""
    return decode(ProposalDetail, repo.client.get(f"/proposals/{segment(line)}/{int(number)}"))


def proposal_merge(repo: RemoteRepo, line: str, number: int, *, by: str) -> Proposal:
    """Merge proposal NUMBER of LINE (a writer of the line's)."""
    found = repo.client.post(f"/proposals/{segment(line)}/{int(number)}/merge", {})
    return decode(Proposal, found)


def proposal_close(repo: RemoteRepo, line: str, number: int, *, by: str) -> Proposal:
    """Close proposal NUMBER of LINE (its proposer's, or a writer's)."""
    found = repo.client.post(f"/proposals/{segment(line)}/{int(number)}/close", {})
    return decode(Proposal, found)


def propose(remote: RemoteRepo, new, head: str | None, description: str) -> dict:
    """Offer NEW (its blobs stored on the registry already) to its line: one request."""
    from mint.exchange.wire import commit_wire

    body = {"commit": commit_wire(new), "base": head, "description": description}
    return remote.client.post("/proposals", body)
