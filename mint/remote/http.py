"""The registry's HTTP API, spoken with httpx: a bearer token on every request, and every
`{"error": {"type", "message", "detail"}}` answer raised again as the mint error it names."""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import os
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import httpx

from mint import __version__
from mint import errors as e

API = "/api/v1"
CHUNK = 1024 * 1024
TIMEOUT = httpx.Timeout(30.0, read=600.0)
# An answer whose type names no mint error falls back on its status.
_BY_STATUS = {401: e.Unauthenticated, 403: e.Forbidden, 404: e.RevisionNotFound}


def is_url(value: object) -> bool:
    """Whether VALUE names a registry (http:// or https://) rather than a folder."""
    return isinstance(value, str) and value.startswith(("http://", "https://"))


def normalize(url: str) -> str:
    return url.rstrip("/")


def segment(text: str) -> str:
    """TEXT as one URL path segment (`chat@v1` as `chat%40v1`)."""
    return quote(text, safe="")


class Client:
    """One registry's API. Every method raises mint's errors, never httpx's."""

    def __init__(self, url: str, token: str | None, *, transport=None):
        self.url = normalize(url)
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

    def post(self, path: str, body: dict) -> Any:
        return self._send("POST", path, json=body).json()

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

    def download(self, blob_id: str, dest: str | os.PathLike) -> int:
        """Write blob BLOB_ID to the new file DEST, hashing it on the way; a blob whose bytes
        do not hash to its id leaves no file and raises BlobCorrupt. Returns its size."""
        digest, size = hashlib.sha256(), 0
        with self._stream(f"/blobs/{blob_id}") as r, open(dest, "xb") as out:
            try:
                for chunk in r.iter_bytes(CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
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
                    raise error_from(r)
                yield r
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            r = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        if r.status_code >= 400:
            raise error_from(r)
        return r

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
    """An instance of the error class NAME with MESSAGE as its text, built without its
    constructor (the server already wrote the words); its data comes from DETAIL."""
    cls = getattr(e, name, None) if name else None
    if not (isinstance(cls, type) and issubclass(cls, (e.MintError, e.StoreError))):
        cls = _BY_STATUS.get(status, e.RegistryError)
    if cls is e.GateRefused:
        return _gate_refused(message, detail, status)
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    for param in _data_names(cls):
        setattr(exc, param, None)  # every attribute the class's handlers may read exists
    if isinstance(exc, e.RegistryError):
        exc.status = status
    if isinstance(detail, dict):
        for key, value in detail.items():
            if isinstance(key, str) and key.isidentifier() and not key.startswith("_"):
                setattr(exc, key, value)
    return exc


def _data_names(cls: type) -> list[str]:
    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return []
    plain = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p for p, v in params.items() if p != "self" and v.kind in plain]


def _gate_refused(message: str, detail: Any, status: int) -> Exception:
    from mint.objects import GateReport
    from mint.remote.wire import decode

    report = detail.get("report", detail) if isinstance(detail, dict) else None
    try:
        return e.GateRefused(decode(GateReport, report))
    except (e.InvalidObject, TypeError, ValueError):
        return e.RegistryError(message, status)
