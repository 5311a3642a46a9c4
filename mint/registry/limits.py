"""Size limits on request bodies, enforced before and while a body is read.

A request whose Content-Length is over its limit is answered 413 before a byte of its body
is read; one without a length (chunked) is counted as it arrives and stopped at the limit.
Blob uploads (`PUT /api/v1/blobs/{id}`) have their own, larger limit, and so do packs of
blobs (`POST /api/v1/blobs/pack`), each blob in them under the blob limit; a serving process's
report (`POST /api/v1/fleet/report`) a smaller one. The deadline on slow
clients and the cap on open connections are kept here too; `serving` enforces them.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mint.registry.failures import error_response

MiB = 1024 * 1024
BLOB_PREFIX = "/api/v1/blobs/"
PACK_PATH = "/api/v1/blobs/pack"
REPORT_PATH = "/api/v1/fleet/report"


@dataclass(frozen=True)
class Limits:
    body: int = 32 * MiB  # any JSON body
    blob: int = 16 * 1024 * MiB  # one uploaded blob
    pack: int = 64 * 1024 * MiB  # one pack of blobs (and never less than one blob)
    request_timeout: float = 30.0  # seconds for a request's head; a body may not stall longer
    connections: int = 1000  # open at once; a request on one more is answered 503
    report: int = 1 * MiB  # a serving process's report (1,000 names, a failure each)
    instances: int = 4096  # live instances one token reports for (more: 429)

    def for_request(self, method: str, path: str) -> int:
        if method == "POST" and path == PACK_PATH:
            return max(self.pack, self.blob)
        if method == "POST" and path == REPORT_PATH:
            return min(self.report, self.body)
        is_upload = method == "PUT" and path.startswith(BLOB_PREFIX) and path != BLOB_PREFIX
        return self.blob if is_upload else self.body


class TooLarge(HTTPException):
    def __init__(self, limit: int):
        super().__init__(413, f"the request body is over its limit of {limit} bytes")


class BodyLimit:
    """ASGI middleware: refuse (413) bodies over the request's limit."""

    def __init__(self, app: ASGIApp, limits: Limits):
        self.app, self.limits = app, limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limits.for_request(scope["method"], scope["path"])
        length = _content_length(scope)
        if length == -1:
            response = error_response(400, "BadRequest", "Content-Length is not a number")
            return await response(scope, receive, send)
        if length is not None and length > limit:
            response = error_response(413, "PayloadTooLarge", str(TooLarge(limit).detail))
            return await response(scope, receive, send)
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise TooLarge(limit)
            return message

        await self.app(scope, counted, send)


def _content_length(scope: Scope) -> int | None:
    """The request's Content-Length; None when absent, -1 when malformed."""
    for key, value in scope.get("headers", ()):
        if key == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() and len(text) < 20 else -1
    return None
