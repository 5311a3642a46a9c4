"""Reads from a registry: one GET each, the answer decoded into `mint.objects` dataclasses."""

from __future__ import annotations

from mint.errors import LocalOnly
from mint.exchange.wire import decode, decode_list
from mint.ids import CommitId, RefKind
from mint.objects import (
    Base,
    CommitDetail,
    CommitInfo,
    Contract,
    Diff,
    Evaluation,
    GateReport,
    LineInfo,
    LineStatus,
    Move,
    RefInfo,
)
from mint.remote.http import segment
from mint.remote.repo import RemoteRepo


def resolve(repo: RemoteRepo, rev: str) -> CommitId:
    """The commit id REV names (any revision form)."""
    return CommitId(repo.client.get("/resolve", rev=rev)["id"])


def log(
    repo: RemoteRepo,
    rev: str | None = None,
    n: int | None = None,
    *,
    since=None,
    until=None,
    author: str | None = None,
) -> list[CommitInfo]:
    """Ancestors of REV newest first; without REV, every commit newest first (narrowed as
    `mint.commits.repository.log` narrows it, the times sent in ISO 8601)."""
    since, until = (t.isoformat() if hasattr(t, "isoformat") else t for t in (since, until))
    found = repo.client.get("/log", rev=rev, n=n, since=since, until=until, author=author)
    return decode_list(CommitInfo, found)


def search(
    repo: RemoteRepo,
    *,
    meta=(),
    metric=(),
    tag=(),
    line: str | None = None,
    author: str | None = None,
    n: int | None = None,
) -> list[CommitInfo]:
    """`mint.search.search` on the registry (which limits it to the token's lines)."""
    query = dict(meta=list(meta), metric=list(metric), tag=list(tag), line=line, author=author)
    return decode_list(CommitInfo, repo.client.get("/search", **query, n=n))


def show(
    repo: RemoteRepo, rev: str, tensors: str = "all", offset: int = 0, limit: int | None = None
) -> CommitDetail:
    """Everything recorded for one commit; TENSORS "all" (a page: OFFSET, LIMIT) or
    "summary" (the registry's default: the table's count and bytes, no rows)."""
    page = {"tensors_offset": offset or None, "tensors_limit": limit}
    found = repo.client.get(f"/commits/{segment(rev)}", tensors=tensors, **page)
    return decode(CommitDetail, found)


def pulled(repo: RemoteRepo, repo_id: str, sha: str, path: str | None = None) -> CommitInfo | None:
    """The commit that holds hub commit SHA of REPO_ID (a set member's: folder PATH), or None
    (also when it lies on a line outside the token's lines)."""
    found = repo.client.get("/pulled", repo=repo_id, sha=sha, folder=path)
    return decode(CommitInfo, found) if found is not None else None


def ls(repo: RemoteRepo, *, limit: int | None = None, after: str | None = None) -> list[LineInfo]:
    """Lines with their kind, head and number of commits (a page: LIMIT after AFTER)."""
    return decode_list(LineInfo, repo.client.get("/lines", limit=limit, after=after))


def diff(repo: RemoteRepo, rev_a: str, rev_b: str) -> Diff:
    """What changed from REV_A to REV_B, computed by the registry."""
    return decode(Diff, repo.client.get("/diff", a=rev_a, b=rev_b))


def status(
    repo: RemoteRepo, *, limit: int | None = None, after: str | None = None
) -> list[LineStatus]:
    """Lines with their heads and the holder of each of their channels (a page)."""
    return decode_list(LineStatus, repo.client.get("/status", limit=limit, after=after))


def history(
    repo: RemoteRepo, ref: str, *, n: int | None = None, before: int | None = None
) -> list[Move]:
    """Moves of LINE@CHANNEL, oldest first: all, or the newest N before entry BEFORE."""
    return decode_list(Move, repo.client.get("/history", ref=ref, n=n, before=before))


def base_ls(repo: RemoteRepo) -> list[Base]:
    """Every base the registry knows, by name."""
    return decode_list(Base, repo.client.get("/bases"))


def tag_list(
    repo: RemoteRepo, line: str | None = None, kind: RefKind = RefKind.TAG
) -> list[RefInfo]:
    """Tags of LINE, or of every line."""
    if kind != RefKind.TAG:
        raise LocalOnly(f"listing {kind}s as refs")
    return decode_list(RefInfo, repo.client.get("/tags", line=line))


def contract_show(
    repo: RemoteRepo, name: str, version: int | None = None, line: str | None = None
) -> Contract:
    """Contract NAME (VERSION, else its latest; LINE: the one whose scope covers it)."""
    found = repo.client.get(f"/contracts/{segment(name)}", version=version, line=line)
    return decode(Contract, found)


def contract_ls(repo: RemoteRepo) -> list[Contract]:
    """The latest version of every contract."""
    return decode_list(Contract, repo.client.get("/contracts"))


def gate(repo: RemoteRepo, rev: str, channel: str, contract: str | None = None) -> GateReport:
    """A dry run of promote, on the registry."""
    params = dict(rev=rev, channel=channel, contract=contract)
    return decode(GateReport, repo.client.get("/gate", **params))


def evaluations_of(repo: RemoteRepo, rev: str) -> list[Evaluation]:
    return decode_list(Evaluation, repo.client.get("/evaluations", rev=rev))


def latest_evaluation(repo: RemoteRepo, rev: str, contract: str) -> Evaluation | None:
    """The newest evaluation of REV under any version of CONTRACT, or None."""
    found = [e for e in evaluations_of(repo, rev) if e.contract == contract]
    return max(found, key=lambda e: (e.version, e.id)) if found else None
