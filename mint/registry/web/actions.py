"""Sign-in and the maintainer's actions (approve, promote, rollback) as forms.

Every POST must carry a CSRF token: sign-in its form's (a double-submit cookie, as there is
no session yet), the others the session's, with a maintainer's (or admin's) session;
anything else is refused with 403 before any operation runs. The actions then make the same
checks and calls as the JSON API (`routes_write`): the channel's protection, the
token's lines, the gate, and the token's name recorded as who acted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response

from mint import api
from mint.errors import (
    Forbidden,
    GateRefused,
    InvalidConfig,
    InvalidForm,
    MintError,
    Unauthenticated,
)
from mint.registry import queries
from mint.registry.auth import check_line, check_move, check_rev
from mint.registry.failures import status_of
from mint.registry.web import views
from mint.registry.web.approvals import approved_at, split_ref
from mint.registry.web.pages import page
from mint.registry.web.render import render
from mint.registry.web.session import (
    check_signin_csrf,
    checked_form,
    end_session,
    end_signin_csrf,
    read_form,
    set_session,
    set_signin_csrf,
    signed_in,
    signin_csrf,
)
from mint.team.tokens import Access, authenticate

router = APIRouter(include_in_schema=False)
Text = Annotated[str, Query(max_length=500)]


def _local(target: str | None) -> str:
    """Only a path on this server is a place to go back to (never another site)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def _channel_url(line: str, channel: str) -> str:
    return f"/channel/{quote(line, safe='/')}@{quote(channel, safe='')}"


@router.get("/signin")
def signin_form(request: Request, next: Text = "/") -> Response:
    return _signin_page(request, signed_in(request), 200, next=_local(next), error=None)


def _signin_page(request: Request, who, status: int, **context) -> Response:
    """The sign-in form, with its CSRF value in a hidden field and in its cookie."""
    value = signin_csrf(request)
    response = render(request, "signin.html", who, status, signin_csrf=value, **context)
    set_signin_csrf(response, request, value)
    return response


@router.post("/signin")
async def signin(request: Request) -> Response:
    """Sign in: the form's CSRF value is checked first (403, no session, the token not even
    looked up), then the token (401). A body that is no form of ours is a 400."""
    try:
        form = await read_form(request)
    except InvalidForm as exc:
        return _signin_page(request, None, 400, next="/", error=exc)
    secret, target = form.get("token", "").strip(), _local(form.get("next"))
    try:
        check_signin_csrf(request, form)
    except Forbidden as exc:
        return _signin_page(request, None, 403, next=target, error=exc)
    try:
        await run_in_threadpool(authenticate, request.app.state.repo, secret)
    except Unauthenticated as exc:
        return _signin_page(request, None, 401, next=target, error=exc)
    response = RedirectResponse(target, status_code=303)
    set_session(response, request, secret)
    end_signin_csrf(response, request)
    return response


@router.post("/signout")
async def signout(request: Request) -> Response:
    return await _act(request, Access.READER, lambda who, form: "/signin", signout=True)


async def _act(request: Request, role: Access, act: Callable, signout: bool = False) -> Response:
    """Check the form (CSRF, ROLE), run ACT(who, form) off the event loop, and go where it
    says; an error shows as a page with the API's status."""
    try:
        who, form = await checked_form(request, role)
    except MintError as exc:
        return render(request, "error.html", signed_in(request), status_of(exc), error=exc)
    try:
        target = await run_in_threadpool(act, who, form)
    except MintError as exc:
        if isinstance(exc, GateRefused) and form.get("then") == "promote":
            r, repo = exc.report, request.app.state.repo
            mine = approved_at(repo, r.commit_id, r.channel, who.name)
            return render(
                request, "promote.html", who, 409, report=r, error=exc, reason="", mine=mine
            )
        return render(request, "error.html", who, status_of(exc), error=exc)
    response = RedirectResponse(target, status_code=303)
    if signout:
        end_session(response, request)
    return response


@router.post("/approve")
async def approve(request: Request) -> Response:
    repo = request.app.state.repo

    def act(who, form):
        rev, channel = form.get("rev", ""), form.get("channel", "")
        check_rev(repo, who, rev)
        check_line(who, queries.line_of(repo, rev))
        api.approve(repo, rev, channel, by=who.name)
        return _local(form.get("back")) if form.get("back") else "/"

    return await _act(request, Access.MAINTAINER, act)


@router.get("/promote")
def promote_form(request: Request, rev: Text, channel: Text) -> Response:
    """The gate's table for REV on CHANNEL, then a form to confirm the move."""
    repo = request.app.state.repo

    def build(who):
        check_rev(repo, who, rev)
        report = api.gate(repo, rev, channel)
        shown = views.known(repo, [report.commit_id, report.holder])
        mine = approved_at(repo, report.commit_id, channel, who.name)
        return {"report": report, "error": None, "reason": "", "mine": mine} | shown

    return page(request, "promote.html", build)


@router.post("/promote")
async def promote(request: Request) -> Response:
    repo = request.app.state.repo

    def act(who, form):
        rev, channel = form.get("rev", ""), form.get("channel", "")
        line = queries.line_of(repo, rev)
        check_move(repo, who, line, channel, force=False)
        reason = form.get("reason", "").strip() or None
        api.promote(repo, rev, channel, by=who.name, reason=reason)
        return _channel_url(line, channel)

    return await _act(request, Access.MAINTAINER, act)


@router.get("/rollback")
def rollback_form(request: Request, ref: Text) -> Response:
    """Ask for the reason before moving LINE@CHANNEL back."""
    repo = request.app.state.repo

    def build(who):
        line, channel = split_ref(ref)
        check_line(who, line)
        moves = api.history(repo, ref, n=1)
        shown = views.known(repo, [moves[-1].to])
        return {
            "ref": ref,
            "line": line,
            "channel": channel,
            "current": moves[-1],
            "error": None,
        } | shown

    return page(request, "rollback.html", build)


@router.post("/rollback")
async def rollback(request: Request) -> Response:
    repo = request.app.state.repo

    def act(who, form):
        ref, reason = form.get("ref", ""), form.get("reason", "").strip()
        line, channel = split_ref(ref)
        check_move(repo, who, line, channel, force=False)
        if not reason:
            raise InvalidConfig(f"rolling back {ref} from the page needs a reason")
        api.rollback(repo, ref, by=who.name, to=form.get("to") or None, reason=reason)
        return _channel_url(line, channel)

    return await _act(request, Access.MAINTAINER, act)
