"""Who may call `mint serve`: bearer tokens, checked before any endpoint but `/healthz`.

Two kinds of token are taken, either or both:

- `StaticToken`: one secret the server was given (`mint serve --token-env NAME`, read from that
  environment variable). Its callers are one identity, `token-<12 hex of its sha256>`: a name
  that says which token it was, never the token.
- `RegistryTokens`: the tokens of the registry the server follows (`--registry-tokens`), each
  checked with `GET /api/v1/whoami` and the answer kept for a minute (a refusal for a few
  seconds), so that a chat costs no round trip. A token limited to lines may call a server only
  when the registry lets it read every version served (`GET /api/v1/commits/ID` with its own
  token): the set's line and each member's line, the registry's own rule for reading a set;
  the answer is kept per token and version, so a channel that moves to a set with other
  members is checked again. Feedback from such a caller is passed on to the
  registry under its own token, so the registry checks its role and records its name.

`RequireToken` is the ASGI middleware: no token, or one no check knows, is answered 401 (a
registry out of reach, 503) with an OpenAI-style error; the caller it found is kept in the
request's scope for the handlers (`feedback_identity`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import httpx

OPEN_PATHS = frozenset({"/healthz"})  # what a load balancer probes, with no token
CACHE_TTL = 60.0  # seconds a registry's answer on a token is kept
REFUSED_TTL = 5.0  # seconds a refused token is remembered
CACHE_SIZE = 4096  # tokens remembered at most


@dataclass(frozen=True)
class Caller:
    """Who called: `name` is what feedback records as `by`; `token` a registry token to pass
    the caller's feedback on with (None: the server records it itself)."""

    name: str
    token: str | None = None
    lines: tuple[str, ...] | None = None  # a registry token's line globs, None for any


class Refused(Exception):
    """A token no check accepts (401), or one whose lines do not cover the served set (403)."""

    def __init__(self, status: int, message: str, code: str):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


class CheckUnavailable(Exception):
    """The registry that checks tokens cannot be asked now (503)."""


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class StaticToken:
    """One secret, compared in constant time; only its digest is kept."""

    def __init__(self, secret: str):
        if not secret:
            raise ValueError("an empty token")
        self._digest = _digest(secret)
        self.name = f"token-{self._digest[:12]}"

    def check(self, token: str) -> Caller | None:
        return Caller(self.name) if hmac.compare_digest(_digest(token), self._digest) else None


class RegistryTokens:
    """The registry's tokens, checked with `GET /api/v1/whoami` and cached by digest."""

    def __init__(self, url: str, *, transport: httpx.BaseTransport | None = None):
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=10.0, transport=transport)
        self._cache: dict[str, tuple[float, Caller | None]] = {}
        self._reads: dict[tuple[str, str], tuple[float, bool]] = {}  # (digest, commit) -> read
        self._lock = threading.Lock()

    def check(self, token: str) -> Caller | None:
        key, now = _digest(token), time.monotonic()
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            caller = hit[1]
        else:
            caller = self._ask(token)
            ttl = CACHE_TTL if caller is not None else REFUSED_TTL
            with self._lock:
                if len(self._cache) >= CACHE_SIZE:
                    self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
                    if len(self._cache) >= CACHE_SIZE:
                        self._cache.clear()
                self._cache[key] = (now + ttl, caller)
        # the caller keeps this token: the one it sent now, which the digest matched
        return None if caller is None else Caller(caller.name, token, caller.lines)

    def may_read(self, token: str, commit_id: str) -> bool:
        """Whether TOKEN may read commit COMMIT_ID, as the registry decides: for a set, its
        line and every member's line must be the token's (`check_commit` there)."""
        key, now = (_digest(token), commit_id), time.monotonic()
        with self._lock:
            hit = self._reads.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        allowed = self._ask_read(token, commit_id)
        with self._lock:
            if len(self._reads) >= CACHE_SIZE:
                self._reads.clear()
            self._reads[key] = (now + (CACHE_TTL if allowed else REFUSED_TTL), allowed)
        return allowed

    def _ask_read(self, token: str, commit_id: str) -> bool:
        try:
            r = self._http.get(
                f"/api/v1/commits/{commit_id}", headers={"Authorization": f"Bearer {token}"}
            )
        except httpx.HTTPError as exc:
            raise CheckUnavailable(f"the registry at {self.url} is out of reach: {exc}") from None
        if r.status_code in (401, 403, 404):  # 404: the token may not learn it exists either
            return False
        if r.status_code != 200:
            raise CheckUnavailable(f"the registry at {self.url} answered {r.status_code}")
        return True

    def _ask(self, token: str) -> Caller | None:
        try:
            r = self._http.get("/api/v1/whoami", headers={"Authorization": f"Bearer {token}"})
        except httpx.HTTPError as exc:
            raise CheckUnavailable(f"the registry at {self.url} is out of reach: {exc}") from None
        if r.status_code in (401, 403):
            return None
        if r.status_code != 200:
            raise CheckUnavailable(f"the registry at {self.url} answered {r.status_code}")
        who = r.json()
        lines = who.get("lines")
        return Caller(str(who["name"]), None, tuple(lines) if lines is not None else None)

    def close(self) -> None:
        self._http.close()


class RequireToken:
    """ASGI middleware: every HTTP request but OPEN_PATHS needs `Authorization: Bearer` with
    a token one of CHECKS accepts. SERVED_VERSIONS() are the set commits serving now (the
    holder, and a canary's candidate): a registry token limited to lines must be one the
    registry lets read each of them; ON_REFUSED(status) counts refusals."""

    def __init__(
        self,
        app,
        checks: Sequence[Any],
        served_versions: Callable[[], Sequence[str]] = lambda: (),
        on_refused: Callable[[int], None] = lambda status: None,
    ):
        self.app, self.checks = app, list(checks)
        self.served_versions, self.on_refused = served_versions, on_refused

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope.get("path") in OPEN_PATHS:
            return await self.app(scope, receive, send)
        try:
            caller = await self._caller(scope)
        except Refused as exc:
            return await self._refuse(send, exc.status, exc.message, exc.code)
        except CheckUnavailable as exc:
            return await self._refuse(send, 503, str(exc), "token_check_unavailable")
        scope.setdefault("state", {})["mint_caller"] = caller
        await self.app(scope, receive, send)

    async def _caller(self, scope) -> Caller:
        token = bearer(scope)
        if token is None:
            raise Refused(401, "this server needs `Authorization: Bearer TOKEN`", "missing_token")
        for check in self.checks:
            if isinstance(check, RegistryTokens):  # may ask the registry: off the event loop
                caller = await anyio.to_thread.run_sync(check.check, token)
            else:
                caller = check.check(token)
            if caller is not None:
                if isinstance(check, RegistryTokens):
                    await self._check_versions(check, caller)
                return caller
        raise Refused(401, "the token is not one this server takes", "invalid_api_key")

    async def _check_versions(self, check: RegistryTokens, caller: Caller) -> None:
        """Refuse (403) a caller limited to lines unless the registry lets its token read
        every version served: the set's line alone is not enough, a set hands out its members'
        adapters (their answers, their commits in /v1/models)."""
        if caller.lines is None or caller.token is None:
            return
        for version in self.served_versions():
            if not await anyio.to_thread.run_sync(check.may_read, caller.token, version):
                why = (
                    f"{caller.name} may not read the set served ({version[:12]}): it shows a"
                    " line outside the token's lines"
                )
                raise Refused(403, why, "permission_denied")

    async def _refuse(self, send, status: int, message: str, code: str) -> None:
        self.on_refused(status)
        kind = "server_error" if status >= 500 else "invalid_request_error"
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        data = json.dumps(body).encode("utf-8")
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
        if status == 401:
            headers.append((b"www-authenticate", b"Bearer"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})


def bearer(scope) -> str | None:
    """The bearer token of a request's Authorization header, if any."""
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            return token if scheme.lower() == "bearer" and token else None
    return None


def feedback_identity(request) -> dict:
    """`by` and `token` for `TraceRecorder.feedback` from the caller `RequireToken` found
    (nothing when the server takes no token)."""
    caller = request.scope.get("state", {}).get("mint_caller")
    if caller is None:
        return {}
    return {"by": caller.name, "token": caller.token}
