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
Only a whole blob over `CHECK_BEFORE` bytes (2 GiB; `MINT_REGISTRY_CHECK_BEFORE` sets it) that
the process has not checked yet is hashed while it is sent, the last read held back until the
hash is known (hashing it first could outlast the client's wait for the answer's head): a
damaged one breaks off before its end, and is then refused at once with a clean 500 (the
Hub client tries again), until the file changes.

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
# A whole blob over this size not yet checked by the process is checked while it is sent, not
# before: hashing it first would keep a client waiting for the answer's head longer than
# huggingface_hub waits (10 s) on a slow machine. MINT_REGISTRY_CHECK_BEFORE sets it: read
# when a blob is sent (not at import), and checked by `mint registry serve` before it starts.
CHECK_BEFORE = 2 << 30


def check_before() -> int:
    """The size past which a whole blob is checked while sent; ValueError (one line) when
    MINT_REGISTRY_CHECK_BEFORE is not a whole number of bytes."""
    text = os.environ.get("MINT_REGISTRY_CHECK_BEFORE")
    if text is None:
        return CHECK_BEFORE
    if not text.strip().isdigit():
        raise ValueError(f"MINT_REGISTRY_CHECK_BEFORE must be a number of bytes, not {text!r}")
    return int(text)


_verified: collections.OrderedDict[str, tuple[int, ...]] = collections.OrderedDict()
_damaged: dict[str, tuple[int, ...]] = {}  # found damaged while sent: refused at once after
_lock = threading.Lock()


def _key(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def forget() -> None:
    """Drop every marker (tests; a server never needs to)."""
    with _lock:
        _verified.clear()
        _damaged.clear()


def _marked(blob_id: str, key: tuple[int, ...]) -> bool:
    with _lock:
        known = _verified.get(blob_id) == key
        if known:
            _verified.move_to_end(blob_id)
    return known


def _mark(blob_id: str, key: tuple[int, ...]) -> None:
    with _lock:
        _verified[blob_id] = key
        while len(_verified) > MARKERS:
            _verified.popitem(last=False)


def _corrupt(blob_id: str, actual: str) -> BlobCorrupt:
    log.error("blob %s is corrupt in the store; run `mint fsck`", blob_id)
    return BlobCorrupt(blob_id, actual)


def open_verified(
    store: LocalObjectStore, blob_id: str, whole: bool = False
) -> tuple[BinaryIO, tuple[int, ...] | None]:
    """The blob's file, open, and None once its bytes are known to be BLOB_ID's: by the
    marker when the open file is the one checked before, else by hashing it now (then
    marked). With WHOLE (the whole blob is to be sent) a blob over CHECK_BEFORE bytes is not
    hashed here but returned with its key, to be checked while it is sent (`FileSpan`).
    Raises BlobMissing, or BlobCorrupt (logged for the server's operator)."""
    f = store.open(blob_id)
    try:
        key = _key(os.fstat(f.fileno()))
        if _marked(blob_id, key):
            return f, None
        if _damaged.get(blob_id) == key:
            raise _corrupt(blob_id, "other bytes (found when it was last sent)")
        if whole and key[2] > check_before():
            return f, key
        actual = hashlib.file_digest(f, "sha256").hexdigest()
        if actual != blob_id:
            raise _corrupt(blob_id, actual)
        if _key(os.fstat(f.fileno())) != key:  # changed while it was read: not marked
            raise _corrupt(blob_id, "a file that changed while it was read")
        _mark(blob_id, key)
        return f, None
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
    """Bytes START..START+COUNT-1 of an open file, sent by the server's sendfile when it
    offers it, else in large reads; the file is closed once sent. With KEY (a whole blob not
    yet checked) the bytes are hashed as they are read and the last read is held back until
    the hash is known: a damaged blob is never sent whole (the connection breaks off), and a
    good one is marked once sent."""

    def __init__(self, f: BinaryIO, blob_id: str, span: tuple[int, int], status: int, **kw):
        start, count = span[0], span[1] - span[0] + 1
        kw["headers"] = {**kw["headers"], "Content-Length": str(count)}
        self.key = kw.pop("key", None)
        super().__init__(None, status, **kw)
        self.file, self.blob_id, self.start, self.count = f, blob_id, start, count

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            start = {"status": self.status_code, "headers": self.raw_headers}
            await send({"type": "http.response.start", **start})
            sendfile = scope.get("extensions", {}).get(SENDFILE)
            if not self.count or scope.get("method") == "HEAD":
                pass
            elif self.key is not None:
                await self._checked(send)
            elif sendfile is not None:
                await sendfile(self.file, self.start, self.count)
            else:
                offset, end = self.start, self.start + self.count
                while offset < end:
                    chunk = await run_in_threadpool(self._read, offset, end - offset)
                    offset += len(chunk)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.file.close()

    def _read(self, offset: int, left: int) -> bytes:
        chunk = os.pread(self.file.fileno(), min(READ_CHUNK, left), offset)
        if not chunk:  # a checked read-only file does not shrink, unless damaged
            raise _corrupt(self.blob_id, "a file shorter than its size")
        return chunk

    def _read_hashed(self, digest, offset: int) -> bytes:
        chunk = self._read(offset, self.count - offset)
        digest.update(chunk)
        return chunk

    async def _checked(self, send: Send) -> None:
        digest, held, offset = hashlib.sha256(), b"", 0
        while offset < self.count:
            chunk = await run_in_threadpool(self._read_hashed, digest, offset)
            offset += len(chunk)
            if held:
                await send({"type": "http.response.body", "body": held, "more_body": True})
            held = chunk
        if digest.hexdigest() != self.blob_id:
            with _lock:  # the client's next try (huggingface_hub retries) gets a clean 500
                _damaged[self.blob_id] = self.key
                if len(_damaged) > MARKERS:
                    _damaged.pop(next(iter(_damaged)))
            raise _corrupt(self.blob_id, digest.hexdigest())
        if _key(os.fstat(self.file.fileno())) == self.key:
            _mark(self.blob_id, self.key)
        await send({"type": "http.response.body", "body": held, "more_body": True})


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
        f, key = open_verified(store, blob_id, whole=span is None)
        kw = {"headers": headers, "media_type": media_type, "key": key}
        return FileSpan(f, blob_id, (start, end), status, **kw)
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
