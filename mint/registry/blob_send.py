"""Sending a stored blob's bytes: every byte handed out is the blob's, checked against its id,
without hashing the blob again on every download.

A local store's blob file is hashed once by each server process, before its first byte is
sent; the check is remembered as a marker keyed by what the file system says of the open file
(device, inode, size, mtime and ctime, in nanoseconds). A later download whose open file still
shows the same key is sent without hashing, straight from the file (`os.sendfile` where the
server offers it, else large reads). Any change made to a blob file through the file system
(a write, a `chmod`, a `touch`, a copy renamed over it) moves its ctime, which nothing can set
back, so a changed file is hashed again before anything of it is sent, and a damaged one is
refused with `BlobCorrupt` (500, one line naming the blob and `mint fsck`): no byte of it goes
out. What a marker cannot see is damage that bypasses the file system (the disk's own silent
errors); `mint fsck` re-hashes every blob for that. Markers live in memory (a restarted server
hashes each blob once again) and are bounded.

The check comes before the answer, not while it is sent (the old way held back the last chunk
and broke the connection off on a mismatch): a ranged request (a client resuming) is checked
like a whole one, and a damaged blob gets a clean error status instead of a cut connection.

Stores that are not local (S3's small blobs, the memory store) stream `verified_chunks` as
before; a range of them is cut from the whole blob's verified bytes.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import os
import threading
from collections.abc import Iterator
from typing import BinaryIO

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mint.registry.upload import verified_chunks
from mint.store import LocalObjectStore, ObjectStore
from mint.store.errors import BlobCorrupt

log = logging.getLogger(__name__)

READ_CHUNK = 4 << 20  # bytes a read hands the server when it cannot send the file itself
SENDFILE = "mint.sendfile"  # the scope extension serving.Protocol offers (zero-copy)
MARKERS = 1 << 16  # blobs whose check a process remembers (least recently sent forgotten)

_verified: collections.OrderedDict[str, tuple[int, ...]] = collections.OrderedDict()
_lock = threading.Lock()


def _key(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def forget() -> None:
    """Drop every marker (tests; a server never needs to)."""
    with _lock:
        _verified.clear()


def open_verified(store: LocalObjectStore, blob_id: str) -> BinaryIO:
    """The blob's file, open, its bytes checked against BLOB_ID: by the marker when the open
    file is the one checked before, else by hashing it now (then marked). BlobMissing,
    BlobCorrupt (logged for the server's operator)."""
    f = store.open(blob_id)
    try:
        key = _key(os.fstat(f.fileno()))
        with _lock:
            known = _verified.get(blob_id) == key
            if known:
                _verified.move_to_end(blob_id)
        if not known:
            actual = hashlib.file_digest(f, "sha256").hexdigest()
            if actual != blob_id:
                log.error("blob %s is corrupt in the store; run `mint fsck`", blob_id)
                raise BlobCorrupt(blob_id, actual)
            if _key(os.fstat(f.fileno())) != key:  # changed while it was read: not marked
                raise BlobCorrupt(blob_id, "a file that changed while it was read")
            with _lock:
                _verified[blob_id] = key
                while len(_verified) > MARKERS:
                    _verified.popitem(last=False)
        return f
    except BaseException:
        f.close()
        raise


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(first, last) byte of a single `bytes=` range, or None for the whole file."""
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    first, _, last = header[6:].strip().partition("-")
    try:
        if not first:
            start, end = max(size - int(last), 0), size - 1
        else:
            start, end = int(first), min(int(last) if last else size - 1, size - 1)
    except ValueError:
        return None
    if start > end or start >= size:
        return None
    return start, end


class FileSpan(Response):
    """Bytes START..START+COUNT-1 of an open (verified) file, sent by the server's sendfile
    when it offers it, else in large reads; the file is closed once sent."""

    def __init__(self, f: BinaryIO, blob_id: str, span: tuple[int, int], status: int, **kw):
        start, count = span[0], span[1] - span[0] + 1
        kw["headers"] = {**kw["headers"], "Content-Length": str(count)}
        super().__init__(None, status, **kw)
        self.file, self.blob_id, self.start, self.count = f, blob_id, start, count

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            start = {"status": self.status_code, "headers": self.raw_headers}
            await send({"type": "http.response.start", **start})
            sendfile = scope.get("extensions", {}).get(SENDFILE)
            if self.count and sendfile is not None and scope.get("method") != "HEAD":
                await sendfile(self.file, self.start, self.count)
            elif self.count and scope.get("method") != "HEAD":
                offset, end = self.start, self.start + self.count
                while offset < end:
                    n = min(READ_CHUNK, end - offset)
                    chunk = await run_in_threadpool(os.pread, self.file.fileno(), n, offset)
                    if not chunk:  # a verified read-only file does not shrink, unless damaged
                        raise BlobCorrupt(self.blob_id, "a file shorter than its size")
                    offset += len(chunk)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.file.close()


def blob_body(
    store: ObjectStore,
    blob_id: str,
    size: int,
    span: tuple[int, int] | None,
    headers: dict,
    media_type: str,
) -> Response:
    """The answer sending blob BLOB_ID of SIZE bytes (SPAN: its bytes first..last, a 206;
    None: all of it, a 200), verified as the module says. Raises BlobCorrupt before anything
    is sent when a local blob does not hash to its id. Call it from a worker thread."""
    start, end = span if span is not None else (0, size - 1)
    status = 206 if span is not None else 200
    if span is not None:
        headers = {**headers, "Content-Range": f"bytes {start}-{end}/{size}"}
    if isinstance(store, LocalObjectStore):
        f = open_verified(store, blob_id)
        return FileSpan(f, blob_id, (start, end), status, headers=headers, media_type=media_type)
    from starlette.responses import StreamingResponse

    headers = {**headers, "Content-Length": str(end - start + 1)}
    body = verified_chunks(store, blob_id) if span is None else _cut(store, blob_id, start, end)
    return StreamingResponse(body, status, headers, media_type)


def _cut(store: ObjectStore, blob_id: str, start: int, end: int) -> Iterator[bytes]:
    """Bytes START..END of the blob, from its whole verified bytes (the last chunk is held
    back until the hash is known, so nothing is yielded from a damaged blob)."""
    offset = 0
    for chunk in verified_chunks(store, blob_id):
        lo, hi = max(start - offset, 0), min(end + 1 - offset, len(chunk))
        if lo < hi:
            yield chunk[lo:hi]
        offset += len(chunk)
