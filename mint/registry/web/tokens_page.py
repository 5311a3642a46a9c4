"""The tokens page: an admin lists, creates and revokes registry tokens.

The same operations and checks as `mint registry token` and `/api/v1/tokens`: only an admin
whose token is not limited to lines (`whole_repo_admin`), never a role above its own, names
that a column can keep, and a revoke clears this replica's token cache. Every POST carries
the session's CSRF token (`checked_form`). A new token's secret is in the answer to the
create form only (a page, never a redirect or a URL), and nothing logs it.
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response

from mint import api
from mint.errors import MintError, UnknownToken
from mint.registry.auth import need, token_cache
from mint.registry.failures import status_of
from mint.registry.routes_team import storable, whole_repo_admin
from mint.registry.web.pages import page
from mint.registry.web.render import render
from mint.registry.web.session import checked_form, signed_in
from mint.repo import Repo
from mint.team.tokens import Access, Identity, NewToken, parse_role

router = APIRouter(include_in_schema=False)
Text = Annotated[str, Query(max_length=500)]
ROLES = [a.value for a in Access]
_SEPARATORS = re.compile(r"[\s,]+")


def admin(who: Identity) -> None:
    """As the API's token routes: an admin token, not limited to lines (403 otherwise)."""
    need(who, Access.ADMIN, "administer tokens")
    whole_repo_admin(who)


def tokens_view(repo: Repo, who: Identity, made: NewToken | None = None, error=None) -> dict:
    """Every token (never a secret), the roles WHO may give, and a token just MADE."""
    admin(who)
    return {
        "tokens": api.token_ls(repo),
        "roles": ROLES,
        "made": made,
        "error": error,
    }


def create(repo: Repo, who: Identity, form: dict[str, str]) -> NewToken:
    """The create form's token: NAME, ROLE and LINES (globs, by commas or spaces)."""
    admin(who)
    name, role = form.get("name", "").strip(), form.get("role", "")
    need(who, parse_role(role), f"make a {role} token")  # never above its own
    globs = [g for g in _SEPARATORS.split(form.get("lines", "")) if g]
    return api.token_create(repo, storable("token", name), role, globs, by=who.name)


def revoke(request: Request, who: Identity, form: dict[str, str]) -> None:
    admin(who)
    api.token_revoke(request.app.state.repo, storable("token", form.get("name", "")))
    token_cache(request.app).clear()  # refused from this replica's next request on


@router.get("/tokens")
def tokens(request: Request) -> Response:
    repo = request.app.state.repo
    return page(request, "tokens.html", lambda who: tokens_view(repo, who))


@router.post("/tokens")
async def tokens_create(request: Request) -> Response:
    """Create a token and show its secret this once; a refusal shows the page with the one
    line that says why (with the API's status)."""
    repo = request.app.state.repo
    try:
        who, form = await checked_form(request, Access.ADMIN)
    except MintError as exc:
        return render(request, "error.html", signed_in(request), status_of(exc), error=exc)
    try:
        made = await run_in_threadpool(create, repo, who, form)
    except MintError as exc:
        return _refused(request, repo, who, exc)
    view = await run_in_threadpool(tokens_view, repo, who, made)
    return render(request, "tokens.html", who, 201, **view)


def _refused(request: Request, repo: Repo, who: Identity, exc: MintError) -> Response:
    try:
        view = tokens_view(repo, who, error=exc)
    except MintError:  # not an admin of the whole repository: the plain error page
        return render(request, "error.html", who, status_of(exc), error=exc)
    return render(request, "tokens.html", who, status_of(exc), **view)


@router.get("/tokens/revoke")
def revoke_form(request: Request, name: Text) -> Response:
    """Ask before revoking NAME (a token in use somewhere stops working at once)."""
    repo = request.app.state.repo

    def build(who):
        admin(who)
        found = [t for t in api.token_ls(repo) if t.name == name]
        if not found:
            raise UnknownToken(name)
        return {"token": found[0]}

    return page(request, "revoke_token.html", build)


@router.post("/tokens/revoke")
async def tokens_revoke(request: Request) -> Response:
    try:
        who, form = await checked_form(request, Access.ADMIN)
        await run_in_threadpool(revoke, request, who, form)
    except MintError as exc:
        return render(request, "error.html", signed_in(request), status_of(exc), error=exc)
    return RedirectResponse("/tokens", status_code=303)
