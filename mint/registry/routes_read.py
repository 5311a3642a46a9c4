"""Reads (role: reader). Each route checks the token's lines, calls one operation, answers
its result as JSON."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.exceptions import RequestValidationError
from pydantic import StringConstraints

from mint import api, objects
from mint.backend.local import LocalBackend
from mint.errors import Forbidden
from mint.ids import Kind
from mint.registry.auth import (
    Reader,
    RepoDep,
    check_commit,
    check_line,
    check_rev,
    visible,
    visible_page,
)
from mint.registry.models import Found, Id64, LineHead, Name, Resolved, Rev, WhoAmI
from mint.registry.render import MintJSON, answer
from mint.registry.schemas import ERROR_RESPONSES, list_of, model_of
from mint.registry.web.channel_api import LAST_ENTRY

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES, tags=["reads"])

RevQuery = Annotated[Rev, Query(description="any revision form: LINE, LINE@TAG, an id, REV~N")]


@router.get("/whoami", response_model=WhoAmI)
def whoami(who: Reader) -> MintJSON:
    return answer({"name": who.name, "role": who.role, "lines": who.lines})


Limit = Annotated[int | None, Query(ge=1, le=100_000, description="at most this many")]
After = Annotated[Name | None, Query(description="only lines named after this one")]


@router.get("/lines", response_model=list_of(objects.LineInfo))
def lines(repo: RepoDep, who: Reader, limit: Limit = None, after: After = None) -> MintJSON:
    read = lambda n, past: api.ls(repo, limit=n, after=past)  # noqa: E731
    return answer(visible_page(who, read, limit, after, lambda i: i.name))


@router.get("/status", response_model=list_of(objects.LineStatus))
def status(repo: RepoDep, who: Reader, limit: Limit = None, after: After = None) -> MintJSON:
    read = lambda n, past: api.status(repo, limit=n, after=past)  # noqa: E731
    return answer(visible_page(who, read, limit, after, lambda i: i.name))


@router.get("/resolve", response_model=Resolved)
def resolve(repo: RepoDep, who: Reader, rev: RevQuery) -> MintJSON:
    check_rev(repo, who, rev)
    return answer({"id": api.resolve(repo, rev)})


Moment = Annotated[
    str | None, Query(max_length=64, description="a time in ISO 8601 (UTC without a zone)")
]


@router.get("/log", response_model=list_of(objects.CommitInfo))
def log(
    repo: RepoDep,
    who: Reader,
    rev: RevQuery | None = None,
    n: Annotated[int | None, Query(ge=1, le=1_000_000)] = None,
    since: Moment = None,
    until: Moment = None,
    author: Annotated[str | None, Query(max_length=200)] = None,
) -> MintJSON:
    if rev is not None:
        check_rev(repo, who, rev)
    found = api.log(repo, rev, n, since=since, until=until, author=author)
    return answer(visible(who, found, lambda c: c.line))


KindQuery = Annotated[Kind, Query(description="the kind of commits the line must hold")]


@router.get("/lines/{line:path}/head", response_model=LineHead)
def line_head(repo: RepoDep, who: Reader, line: Name, kind: KindQuery) -> MintJSON:
    """LINE's head and its tree (both null for a line that does not exist yet): what a
    commit made on the client needs to name its parent and to see that nothing changed."""
    check_line(who, line)
    head, tree = LocalBackend(repo).line_head(line, kind)
    return answer({"head": head, "tree": tree})


@router.get("/lines/{line:path}/trees/{tree}", response_model=Found)
def line_tree(repo: RepoDep, who: Reader, line: Name, tree: Id64, kind: KindQuery) -> MintJSON:
    """The newest KIND commit of LINE whose content is TREE, or null."""
    check_line(who, line)
    return answer({"id": LocalBackend(repo).existing(line, kind, tree)})


HubRepo = Annotated[str, StringConstraints(min_length=3, max_length=200)]
HubSha = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40,64}$")]
HubPath = Annotated[str, StringConstraints(min_length=1, max_length=1000)]


@router.get("/pulled", response_model=model_of(objects.CommitInfo) | None)
def pulled(
    repo: RepoDep,
    who: Reader,
    repo_: Annotated[HubRepo, Query(alias="repo", description="the hub repo, ORG/NAME")],
    sha: Annotated[HubSha, Query(description="the hub commit")],
    folder: Annotated[HubPath | None, Query(description="a set member's folder")] = None,
) -> MintJSON:
    """The commit that holds hub commit SHA of REPO (a set member: its FOLDER), or null,
    also when it shows a line outside the token's lines: a pull then records its own."""
    found = LocalBackend(repo).pulled(repo_, sha, folder)
    if found is not None and who.lines is not None:
        try:
            check_commit(repo, who, found.id)
        except Forbidden:
            found = None
    return answer(found)


TensorsQuery = Annotated[
    Literal["summary", "all"] | None,
    Query(
        description="summary (the default): the tensor table's count and bytes, no rows; all:"
        " its rows (a page with tensors_offset and tensors_limit)"
    ),
]
TensorsOffset = Annotated[
    int | None, Query(ge=0, le=2**31 - 1, description="the page's first row (from 0)")
]
TensorsLimit = Annotated[
    int | None, Query(ge=1, le=100_000, description="at most this many tensor rows")
]


@router.get("/commits/{rev:path}", response_model=model_of(objects.CommitDetail))
def show(
    repo: RepoDep,
    who: Reader,
    rev: Rev,
    tensors: TensorsQuery = None,
    tensors_offset: TensorsOffset = None,
    tensors_limit: TensorsLimit = None,
) -> MintJSON:
    """One commit. Its tensor table (hundreds of rows for an adapter) is summarized unless
    asked for: `tensor_count` and `tensor_bytes` always, the rows with ?tensors=all."""
    paged = tensors_offset is not None or tensors_limit is not None
    if tensors == "summary" and paged:
        raise RequestValidationError(
            [{"loc": ("query", "tensors"), "msg": "a summary has no page: use tensors=all"}]
        )
    check_rev(repo, who, rev)
    wanted = tensors or ("all" if paged else "summary")
    return answer(api.show(repo, rev, wanted, tensors_offset or 0, tensors_limit))


@router.get("/diff", response_model=model_of(objects.Diff))
def diff(repo: RepoDep, who: Reader, a: RevQuery, b: RevQuery) -> MintJSON:
    check_rev(repo, who, a)
    check_rev(repo, who, b)
    return answer(api.diff(repo, a, b))


@router.get("/history", response_model=list_of(objects.Move))
def history(
    repo: RepoDep,
    who: Reader,
    ref: Annotated[Rev, Query(description="LINE@CHANNEL")],
    n: Annotated[int | None, Query(ge=1, le=100_000, description="the newest N moves")] = None,
    before: Annotated[
        int | None, Query(ge=0, le=2**62, description="moves before this entry id")
    ] = None,
) -> MintJSON:
    check_line(who, ref.partition("@")[0])
    if before is not None:  # no entry is later; a larger number overflows the column's type
        before = min(before, LAST_ENTRY)
    return answer(api.history(repo, ref, n=n, before=before))


@router.get("/tags", response_model=list_of(objects.RefInfo))
def tags(repo: RepoDep, who: Reader, line: Annotated[Name | None, Query()] = None) -> MintJSON:
    if line is not None:
        check_line(who, line)
    return answer(visible(who, api.tag_list(repo, line), lambda t: t.line))


@router.get("/bases", response_model=list_of(objects.Base))
def bases(repo: RepoDep, who: Reader) -> MintJSON:
    return answer(api.base_ls(repo))


@router.get("/contracts", response_model=list_of(objects.Contract))
def contracts(repo: RepoDep, who: Reader) -> MintJSON:
    return answer(api.contract_ls(repo))


@router.get("/contracts/{name}", response_model=model_of(objects.Contract))
def contract(
    repo: RepoDep,
    who: Reader,
    name: Name,
    version: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
    line: Annotated[str | None, Query(max_length=200)] = None,
) -> MintJSON:
    """Contract NAME; with LINE, the one of that name whose scope covers the line."""
    return answer(api.contract_show(repo, name, version, line))


@router.get("/gate", response_model=model_of(objects.GateReport))
def gate(
    repo: RepoDep,
    who: Reader,
    rev: RevQuery,
    channel: Annotated[Name, Query()],
    contract: Annotated[Name | None, Query()] = None,
) -> MintJSON:
    check_rev(repo, who, rev)
    return answer(api.gate(repo, rev, channel, contract))


@router.get("/evaluations", response_model=list_of(objects.Evaluation))
def evaluations(repo: RepoDep, who: Reader, rev: RevQuery) -> MintJSON:
    check_rev(repo, who, rev)
    return answer(api.evaluations_of(repo, rev))
