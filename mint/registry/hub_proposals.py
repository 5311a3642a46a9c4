"""The Hub's pull requests as mint's proposals (issue 37): `get_repo_discussions`,
`get_discussion_details`, `merge_pull_request` and `change_discussion_status` on a line.

A proposal is made by `create_commit(create_pr=True)` (`hub_write.commit`), never by an empty
`create_pull_request`: a proposal is a commit. Every proposal is a pull request; there are no
other discussions. Reading needs a reader of the line; merging, a writer of it; closing, the
proposer or a writer.
"""

from __future__ import annotations

from fastapi import Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response

from mint import api
from mint import errors as e
from mint.objects import Proposal
from mint.registry.auth import check_line, need
from mint.registry.hf_protocol import SHOWN, HubMiss, hub_time
from mint.registry.hub_write import base_url, hub_answers, hub_identity, read_json
from mint.team.tokens import Access, Identity

PAGE = 50  # proposals a page (`?p=N`)
_STATUS = {"open": "open", "closed": "closed", "merged": "merged"}


def read(request: Request, line: str, rest: list[str]) -> Response:
    """`/discussions` (a page, `?p=N`, `?status=`, `?author=`) or `/discussions/{n}`."""
    who = hub_identity(request)
    repo = request.app.state.repo
    with hub_answers():
        need(who, Access.READER, f"read the proposals of {line}")
        check_line(who, line)
        if not rest:
            return _page(request, line, api.proposal_ls(repo, line))
        if len(rest) == 1 and rest[0].isdigit():
            return JSONResponse(_details(request, line, int(rest[0])))
    raise HubMiss("EntryNotFound", f"no such route under {line}/discussions")


def _page(request: Request, line: str, found: list[Proposal]) -> Response:
    q = request.query_params
    status, author = q.get("status"), q.get("author")
    if status and status != "all":
        found = [p for p in found if p.status == status]
    if author:
        found = [p for p in found if p.by == author]
    page = q.get("p", "0")
    start = int(page) * PAGE if page.isdigit() else 0
    items = [_item(request, p) for p in found[start : start + PAGE]]
    return JSONResponse({"count": len(found), "start": start, "discussions": items})


def _item(request: Request, p: Proposal) -> dict:
    return {
        "num": p.number,
        "title": p.title,
        "status": _STATUS[p.status],
        "createdAt": hub_time(p.created_at),
        "author": {"name": p.by},
        "repo": {"name": p.line, "type": "model"},
        "isPullRequest": True,
        "pinned": False,
        "numComments": 1,
        "topReactions": [],
    }


def _details(request: Request, line: str, number: int) -> dict:
    detail = api.proposal_show(request.app.state.repo, line, number)
    p = detail.proposal
    events = [
        _event(
            p,
            "comment",
            p.created_at,
            p.by,
            {
                "edited": False,
                "hidden": False,
                "latest": {"raw": p.description or p.title, "html": ""},
            },
        ),
        _event(p, "commit", p.created_at, p.by, {"subject": p.title, "oid": p.commit_id[:SHOWN]}),
    ]
    if p.closed_at:
        events.append(_event(p, "status-change", p.closed_at, p.closed_by, {"status": p.status}))
    merged = p.commit_id[:SHOWN] if p.status == "merged" else None
    return _item(request, p) | {
        "events": events,
        "changes": {"base": "refs/heads/main", "mergeCommitId": merged},
        "filesWithConflicts": [],
        "diff": _diff_text(detail),
        "diffUrl": f"{base_url(request)}/proposal/{line}/{number}",
    }


def _event(p: Proposal, kind: str, at: str, by: str | None, data: dict) -> dict:
    return {
        "id": f"{p.line}#{p.number}/{kind}",
        "type": kind,
        "createdAt": hub_time(at),
        "author": {"name": by or "deleted"},
        "data": data,
    }


def _diff_text(detail) -> str:
    """The files the proposal changes against the line's head, one a line."""
    if detail.diff is None:
        return ""
    return "".join(
        f"{path}: {(old or '-')[:12]} -> {(new or '-')[:12]}\n"
        for path, (old, new) in detail.diff.files.items()
    )


async def write(request: Request, line: str, rest: list[str]) -> Response:
    """`/discussions/{n}/merge` (a writer's) and `/discussions/{n}/status` (closing: the
    proposer's or a writer's); an empty `/discussions` (create_pull_request) is refused."""
    who = hub_identity(request)
    if not rest:
        why = "a proposal is a commit: create_commit(..., create_pr=True) makes one"
        raise HubMiss("BadRequest", why, status=400)
    if len(rest) != 2 or not rest[0].isdigit() or rest[1] not in ("merge", "status"):
        raise HubMiss("EntryNotFound", f"no such route under {line}/discussions", status=404)
    number, body = int(rest[0]), await read_json(request) if await request.body() else {}
    repo = request.app.state.repo
    with hub_answers():
        check_line(who, line)
        if rest[1] == "merge":
            need(who, Access.WRITER, f"merge proposal {number} of {line}")
            await run_in_threadpool(lambda: api.proposal_merge(repo, line, number, by=who.name))
            return JSONResponse({})
        p = await run_in_threadpool(lambda: _set_status(repo, who, line, number, body))
    event = _event(p, "status-change", p.closed_at or p.created_at, who.name, {"status": p.status})
    return JSONResponse({"newStatus": event})


def _set_status(repo, who: Identity, line: str, number: int, body: dict) -> Proposal:
    """Close proposal NUMBER (its proposer or a writer); `open` keeps an open one open, and
    a proposal merged or closed stays so (propose again)."""
    status = body.get("status")
    if status not in ("open", "closed"):
        raise e.InvalidObject("a proposal's new status is open or closed")
    found = api.proposal_show(repo, line, number).proposal
    if status == "open":
        if found.status != "open":
            raise e.ProposalClosed(line, number, found.status)
        return found
    if found.by != who.name:
        need(who, Access.WRITER, f"close another's proposal {number} of {line}")
    return api.proposal_close(repo, line, number, by=who.name)
