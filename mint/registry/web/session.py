"""Who a page is for: the registry token kept in a session cookie, and the CSRF token its
forms carry.

The cookie holds the token itself (`HttpOnly`, `SameSite=Strict`, `Secure` over https), so
every request is checked against the token table as the JSON API checks a bearer token; a
revoked token signs its sessions out at once. The CSRF token is an HMAC keyed by the token's
hash: any replica over the same database computes the same value, and nothing is stored.

Sign-in has no session yet, so its form is guarded by a double-submit token: `GET /signin`
sets a random value in a cookie of its own (`HttpOnly`, `SameSite=Strict`, path /signin) and
puts the same value in the form; `POST /signin` needs the two to match. Another site can make
a browser post the form but can neither read nor set that cookie, so it cannot sign a victim
in as itself (login CSRF).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from urllib.parse import parse_qsl

from fastapi import Request
from fastapi.responses import Response

from mint.errors import Forbidden, InvalidForm, MintError, Unauthenticated
from mint.team.tokens import Access, Identity, authenticate, token_hash

COOKIE = "mint_session"
SIGNIN_COOKIE = "mint_signin"  # the sign-in form's CSRF value, before there is a session
SIGNIN_PATH = "/signin"
_SIGNIN_VALUE = re.compile(r"[0-9a-f]{64}")
MAX_FORM = 64 * 1024  # a page's form is a few fields; more is not a form of ours
MAX_FIELDS = 50


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


def _same(sent: str, expected: str) -> bool:
    """Constant-time equality of two strings, whatever characters a form sent."""
    return hmac.compare_digest(sent.encode("utf-8", "replace"), expected.encode("utf-8"))


def signin_csrf(request: Request) -> str:
    """The sign-in form's CSRF value: the request's sign-in cookie when it holds one (two tabs'
    forms both work), else a new random one to set with `set_signin_csrf`."""
    value = request.cookies.get(SIGNIN_COOKIE, "")
    return value if _SIGNIN_VALUE.fullmatch(value) else secrets.token_hex(32)


def set_signin_csrf(response: Response, request: Request, value: str) -> None:
    response.set_cookie(
        SIGNIN_COOKIE,
        value,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path=SIGNIN_PATH,
    )


def end_signin_csrf(response: Response, request: Request) -> None:
    """Signed in: the next sign-in gets a new value."""
    response.delete_cookie(
        SIGNIN_COOKIE,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path=SIGNIN_PATH,
    )


def check_signin_csrf(request: Request, form: dict[str, str]) -> None:
    """Raise Forbidden (403) unless the sign-in form carries its cookie's CSRF value."""
    cookie = request.cookies.get(SIGNIN_COOKIE, "")
    if not _SIGNIN_VALUE.fullmatch(cookie) or not _same(form.get("csrf", ""), cookie):
        raise Forbidden(
            "anonymous",
            "sign in with this form: its CSRF token is missing or wrong (load the sign-in "
            "page again)",
        )


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
    """An url-encoded form's fields (the last value of a repeated one). Raises InvalidForm
    (400) for a body larger than MAX_FORM or with more than MAX_FIELDS fields."""
    body = await request.body()
    if len(body) > MAX_FORM:
        raise InvalidForm(f"over {MAX_FORM} bytes: no form of this site is that large")
    text = body.decode("utf-8", errors="replace")
    try:
        return dict(parse_qsl(text, keep_blank_values=True, max_num_fields=MAX_FIELDS))
    except ValueError:  # parse_qsl's only refusal here: more fields than MAX_FIELDS
        raise InvalidForm(
            f"over {MAX_FIELDS} fields: no form of this site has that many"
        ) from None


async def checked_form(request: Request, role: Access) -> tuple[Identity, dict[str, str]]:
    """The signed-in identity and the posted form, after the CSRF token and ROLE are checked.
    Raises Forbidden (403) for a missing or wrong CSRF token or a role too low."""
    who = signed_in(request)
    form = await read_form(request)
    if who is None:
        raise Forbidden("anonymous", "act on a page without signing in")
    expected = csrf_token(request)
    if not expected or not _same(form.get("csrf", ""), expected):
        raise Forbidden(who.name, "post this form: its CSRF token is missing or wrong")
    if not who.role.allows(role):
        raise Forbidden(who.name, f"do this: it needs the {role} role, the token is {who.role}")
    return who, form
