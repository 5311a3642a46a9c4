"""Who a page is for: the registry token kept in a session cookie, and the CSRF token its
forms carry.

The cookie holds the token itself (`HttpOnly`, `SameSite=Strict`, `Secure` over https), so
every request is checked against the token table as the JSON API checks a bearer token; a
revoked token signs its sessions out at once. The CSRF token is an HMAC keyed by the token's
hash: any replica over the same database computes the same value, and nothing is stored.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import parse_qsl

from fastapi import Request
from fastapi.responses import Response

from mint.errors import Forbidden, MintError, Unauthenticated
from mint.registry.tokens import Access, Identity, authenticate, token_hash

COOKIE = "mint_session"
MAX_FORM = 64 * 1024  # a page's form is a few fields; more is not a form of ours


def signed_in(request: Request) -> Identity | None:
    """The identity of the request's session cookie, or None (none, unknown or revoked)."""
    secret = request.cookies.get(COOKIE)
    if not secret:
        return None
    try:
        return authenticate(request.app.state.repo, secret)
    except (Unauthenticated, MintError):
        return None


def csrf_token(request: Request) -> str:
    """The CSRF token of the request's session ('' without one)."""
    secret = request.cookies.get(COOKIE)
    if not secret:
        return ""
    key = token_hash(secret).encode("ascii")
    return hmac.new(key, b"mint-web-csrf", hashlib.sha256).hexdigest()


def set_session(response: Response, request: Request, secret: str) -> None:
    response.set_cookie(
        COOKIE,
        secret,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )


def end_session(response: Response, request: Request) -> None:
    response.delete_cookie(
        COOKIE, httponly=True, samesite="strict", secure=request.url.scheme == "https", path="/"
    )


async def read_form(request: Request) -> dict[str, str]:
    """An url-encoded form's fields (the last value of a repeated one)."""
    body = await request.body()
    if len(body) > MAX_FORM:
        raise Forbidden("page", "send a form this large")
    text = body.decode("utf-8", errors="replace")
    return dict(parse_qsl(text, keep_blank_values=True, max_num_fields=50))


async def checked_form(request: Request, role: Access) -> tuple[Identity, dict[str, str]]:
    """The signed-in identity and the posted form, after the CSRF token and ROLE are checked.
    Raises Forbidden (403) for a missing or wrong CSRF token or a role too low."""
    who = signed_in(request)
    form = await read_form(request)
    if who is None:
        raise Forbidden("anonymous", "act on a page without signing in")
    expected = csrf_token(request)
    if not expected or not hmac.compare_digest(form.get("csrf", ""), expected):
        raise Forbidden(who.name, "post this form: its CSRF token is missing or wrong")
    if not who.role.allows(role):
        raise Forbidden(who.name, f"do this: it needs the {role} role, the token is {who.role}")
    return who, form
