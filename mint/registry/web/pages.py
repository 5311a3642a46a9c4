"""The pages (GET): lines, a line, a commit, a diff and a channel. Each needs a signed-in
session (the registry answers nothing without a token); none is in `/openapi.json`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import FileResponse, RedirectResponse, Response

from mint.errors import MintError, StoreError
from mint.registry.failures import status_of
from mint.registry.web import views
from mint.registry.web.fleet import fleet_context
from mint.registry.web.render import HEADERS, STATIC, render
from mint.registry.web.session import signed_in
from mint.team.tokens import Identity

router = APIRouter(include_in_schema=False)
Text = Annotated[str, Query(max_length=500)]


def page(request: Request, template: str, build: Callable[[Identity], dict]) -> Response:
    """TEMPLATE over BUILD(identity); to the sign-in page without a session; an error page
    with the API's status for the API's errors (and the store's: a damaged blob is a 500)."""
    who = signed_in(request)
    if who is None:
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/signin?next={quote(here, safe='')}", status_code=303)
    try:
        context = build(who)
    except (MintError, StoreError) as exc:
        return render(request, "error.html", who, status_of(exc), error=exc)
    return render(request, template, who, **context)


@router.get("/")
def lines(request: Request, q: Text = "", after: Text | None = None) -> Response:
    repo = request.app.state.repo
    return page(request, "lines.html", lambda who: views.lines_page(repo, who, q.strip(), after))


@router.get("/line/{line:path}")
def line(request: Request, line: str, after: Text | None = None) -> Response:
    repo = request.app.state.repo
    return page(request, "line.html", lambda who: views.line_page(repo, who, line, after))


@router.get("/commit/{rev:path}")
def commit(request: Request, rev: str) -> Response:
    repo = request.app.state.repo
    return page(request, "commit.html", lambda who: views.commit_page(repo, who, rev))


@router.get("/proposal/{line:path}/{number}")
def proposal(request: Request, line: str, number: Annotated[int, Path(ge=1)]) -> Response:
    repo = request.app.state.repo
    return page(request, "proposal.html", lambda who: views.proposal_page(repo, who, line, number))


@router.get("/diff")
def diff(request: Request, a: Text, b: Text, sort: Text = "name") -> Response:
    repo = request.app.state.repo
    return page(request, "diff.html", lambda who: views.diff_page(repo, who, a, b, sort))


@router.get("/channel/{ref:path}")
def channel(
    request: Request, ref: str, before: Annotated[int | None, Query(ge=0)] = None
) -> Response:
    repo, after = request.app.state.repo, request.app.state.diverged_after

    def build(who: Identity) -> dict:  # the page, then its fleet (mint.registry.web.fleet)
        return views.channel_page(repo, who, ref, before) | fleet_context(repo, ref, after)

    return page(request, "channel.html", build)


@router.get("/static/style.css")
def stylesheet() -> Response:
    headers = {k: v for k, v in HEADERS.items() if k != "Cache-Control"}
    return FileResponse(STATIC / "style.css", media_type="text/css", headers=headers)
