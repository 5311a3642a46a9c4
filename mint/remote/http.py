"""The registry's HTTP API, spoken with httpx: a bearer token on every request, and every
`{"error": {"type", "message", "detail"}}` answer raised again as the mint error it names."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import httpx

from mint import __version__
from mint import errors as e
from mint.exchange.wire import PACK_TYPE, pack_header

API = "/api/v1"
CHUNK = 1024 * 1024
TIMEOUT = httpx.Timeout(30.0, read=600.0)
# An answer whose type names no mint error falls back on its status.
_BY_STATUS = {401: e.Unauthenticated, 403: e.Forbidden, 404: e.RevisionNotFound}


def normalize(url: str) -> str:
    return url.rstrip("/")


def segment(text: str) -> str:
    """TEXT as one URL path segment (`chat@v1` as `chat%40v1`)."""
    return quote(text, safe="")


class Client:
    """One registry's API. Every method raises mint's errors, never httpx's."""

    def __init__(self, url: str, token: str | None, *, transport=None, token_from=None):
        self.url = normalize(url)
        self.sent_token, self.token_from = bool(token), token_from
        headers = {"User-Agent": f"mint/{__version__}"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # Redirects are followed (a blob may be served from a presigned URL); httpx drops the
        # Authorization header when a redirect leaves the registry's origin.
        self._http = httpx.Client(
            base_url=self.url + API,
            headers=headers,
            timeout=TIMEOUT,
            transport=transport,
            follow_redirects=True,
        )

    def close(self) -> None:
        self._http.close()

    def get(self, path: str, **params: Any) -> Any:
        return self._send("GET", path, params=_params(params)).json()

    def post(self, path: str, body: dict, *, timeout: float | None = None) -> Any:
        """POST BODY as JSON; TIMEOUT (seconds) instead of the client's deadlines."""
        extra = {"timeout": timeout} if timeout is not None else {}
        r = self._send("POST", path, json=body, **extra)
        return r.json() if r.content else None  # 204: nothing to say

    def delete(self, path: str) -> Any:
        return self._send("DELETE", path).json()

    def put_blob(
        self, blob_id: str, path: str | os.PathLike, size: int, advance: Callable | None = None
    ) -> bool:
        """Stream the file at PATH as blob BLOB_ID. True when the registry stored it anew."""

        def chunks() -> Iterator[bytes]:
            with open(path, "rb") as f:
                while chunk := f.read(CHUNK):
                    yield chunk
                    if advance:
                        advance(len(chunk))

        headers = {"Content-Length": str(size), "Content-Type": "application/octet-stream"}
        r = self._send("PUT", f"/blobs/{blob_id}", content=chunks(), headers=headers)
        return r.status_code == 201

    def post_pack(
        self,
        blobs: list[tuple[str, str | os.PathLike, int]],
        advance: Callable | None = None,
        done: Callable | None = None,
    ) -> list[dict]:
        """Stream BLOBS ((id, file, size) each) as one pack (`mint.exchange.wire.pack_header`,
        then the bytes), calling ADVANCE with each chunk's length and DONE with each blob's id
        once it is sent. Returns the registry's {id, size, written} for each."""
        header = pack_header([(blob_id, size) for blob_id, _, size in blobs])

        def chunks() -> Iterator[bytes]:
            yield header
            for blob_id, path, size in blobs:
                with open(path, "rb") as f:
                    left = size
                    while left and (chunk := f.read(min(CHUNK, left))):
                        left -= len(chunk)
                        yield chunk
                        if advance:
                            advance(len(chunk))
                if left:
                    raise e.InvalidObject(f"{path} is {size - left} bytes, not {size}: changed")
                if done:
                    done(blob_id)

        length = len(header) + sum(size for _, _, size in blobs)
        headers = {"Content-Length": str(length), "Content-Type": PACK_TYPE}
        r = self._send("POST", "/blobs/pack", content=chunks(), headers=headers)
        return r.json()["blobs"]

    def download(
        self, blob_id: str, dest: str | os.PathLike, advance: Callable | None = None
    ) -> int:
        """Write blob BLOB_ID to the new file DEST, hashing it on the way, calling ADVANCE with
        each chunk's length; a blob whose bytes do not hash to its id leaves no file and raises
        BlobCorrupt. Returns its size."""
        digest, size = hashlib.sha256(), 0
        with self._stream(f"/blobs/{blob_id}") as r, open(dest, "xb") as out:
            try:
                for chunk in r.iter_bytes(CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
                    if advance:
                        advance(len(chunk))
                if digest.hexdigest() != blob_id:
                    raise e.BlobCorrupt(blob_id, digest.hexdigest())
            except BaseException:
                out.close()
                os.unlink(dest)
                raise
        return size

    @contextlib.contextmanager
    def _stream(self, path: str) -> Iterator[httpx.Response]:
        try:
            with self._http.stream("GET", path) as r:
                if r.status_code >= 400:
                    r.read()
                    raise self._refused(r)
                yield r
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            r = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        if r.status_code >= 400:
            raise self._refused(r)
        return r

    def _refused(self, r: httpx.Response) -> Exception:
        """The error answer R as mint's error; a refused token's error says which token was
        sent, and where it came from (`token_from`), so that the CLI can say what to fix."""
        exc = error_from(r)
        if isinstance(exc, e.Unauthenticated):
            exc.registry, exc.sent_token = self.url, self.sent_token
            exc.token_from = self.token_from
        return exc

    def _unreachable(self, exc: Exception) -> e.RegistryUnreachable:
        why = str(exc) or type(exc).__name__
        return e.RegistryUnreachable(f"the registry at {self.url} did not answer: {why}")


def _params(params: dict) -> dict:
    return {k: v for k, v in params.items() if v is not None and v != []}


# --- errors back into mint's classes ---------------------------------------------------


def error_from(r: httpx.Response) -> Exception:
    """The mint error an error answer names, carrying its message and detail."""
    try:
        body = r.json()["error"]
        name, message, detail = body["type"], str(body["message"]), body.get("detail")
    except (ValueError, KeyError, TypeError):
        text = " ".join(r.text.split())[:200] or r.reason_phrase
        name, message, detail = None, f"the registry answered {r.status_code}: {text}", None
    return rebuild(name, message, detail, r.status_code)


def rebuild(name: str | None, message: str, detail: Any, status: int) -> Exception:
    """The error class NAME of `mint.errors` built again from DETAIL, its constructor's fields
    (`mint.errors.error_fields`), so that it carries the same data as on the server. MESSAGE,
    the server's words, stays its text. A name that is no mint error falls back on the status;
    fields the constructor refuses give a plain RegistryError."""
    cls = getattr(e, name, None) if name else None
    if not (isinstance(cls, type) and issubclass(cls, (e.MintError, e.StoreError))):
        return _bare(_BY_STATUS.get(status, e.RegistryError), message, None, status)
    names = e.error_fields(cls)
    if cls is e.GateRefused:
        detail = {"report": _gate_report(detail)}  # its detail is the GateReport itself
    if not (names and isinstance(detail, dict) and all(n in detail for n in names)):
        return _bare(cls, message, detail, status)  # an older registry sent no (or less) data
    try:
        exc = cls(**{n: detail[n] for n in names})
    except Exception:  # noqa: BLE001 - whatever the constructor makes of bad fields
        return e.RegistryError(message, status)
    if " ".join(str(exc).split()) != message:
        exc.args = (message,)
    return _with_status(exc, status)


def _bare(cls: type, message: str, detail: Any, status: int) -> Exception:
    """CLS with MESSAGE as its text, built without its constructor; the fields DETAIL lacks
    are None, so every attribute the CLI's hints may read exists."""
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    given = detail if isinstance(detail, dict) else {}
    for field in e.error_fields(cls):
        if field != "message":  # the text is the message
            setattr(exc, field, given.get(field))
    return _with_status(exc, status)


def _with_status(exc: Exception, status: int) -> Exception:
    if isinstance(exc, e.RegistryError) and getattr(exc, "status", None) is None:
        exc.status = status
    return exc


def _gate_report(detail: Any) -> Any:
    from mint.exchange.wire import decode
    from mint.objects import GateReport

    try:
        return decode(GateReport, detail)
    except (e.InvalidObject, TypeError, ValueError):
        return None
