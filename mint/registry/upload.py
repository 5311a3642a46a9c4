"""Receiving and sending blob bytes: streamed, hashed on the way, never whole in memory.

An upload goes to a temp file beside the store's own temp files (locked while it is written,
so that gc removes it only once its writer is gone), is hashed as it arrives and is handed to
the store only if it hashes to its id; otherwise nothing is stored.

A pack (`POST /api/v1/blobs/pack`) is many uploads in one body: a header line of JSON,
`{"blobs": [[id, size], ...]}`, then each blob's bytes in that order, nothing between them.
The header is checked whole before a byte of a blob is read (ids, sizes, the body's length);
then each blob is received as one upload is, and stored once its bytes hash to its id.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from mint.errors import BlobCorrupt, InvalidObject
from mint.exchange import received
from mint.repo import Repo
from mint.store import ObjectStore
from mint.store.base import CHUNK, PutResult

log = logging.getLogger("mint.registry")
PACK_HEADER = 1 << 20  # bytes of a pack's header line, at most
PACK_BLOBS = 10_000  # blobs in one pack, at most


def upload_folder(repo: Repo) -> Path:
    """The store's temp folder when it has one (gc cleans it), else .mint/tmp."""
    folder = Path(getattr(repo.store, "tmp", None) or repo.mint_dir / "tmp")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def receive_blob(
    repo: Repo, chunks: AsyncIterator[bytes], blob_id: str, observer=None
) -> PutResult:
    """Store the bytes of CHUNKS as blob BLOB_ID if they hash to it (InvalidObject if not);
    OBSERVER, if given, sees each chunk and then `done(blob_id, size)`. A store that adopts
    its own temp files (the local one) takes the file as written: the bytes are written and
    hashed once; another store is handed the file to copy."""
    adopt = getattr(repo.store, "adopt", None)
    prefix = "blob-" if adopt is not None else "upload-"
    fd, name = tempfile.mkstemp(dir=upload_folder(repo), prefix=prefix)
    owned = True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        digest, size = hashlib.sha256(), 0
        async for chunk in chunks:
            digest.update(chunk)
            if observer is not None:
                observer.update(chunk)
            _write_all(fd, chunk)
            size += len(chunk)
        actual = digest.hexdigest()
        if actual != blob_id:
            raise InvalidObject(
                f"the {size} bytes sent hash to {actual[:12]}, not {blob_id[:12]}: nothing stored"
            )
        if observer is not None:
            await run_in_threadpool(observer.done, blob_id, size)
        if adopt is None:
            return await run_in_threadpool(repo.store.put, name, blob_id=blob_id)
        await run_in_threadpool(os.fsync, fd)
        staged, owned = adopt(fd, name, blob_id, size), False
        return await run_in_threadpool(staged.publish)
    finally:
        if owned:
            os.close(fd)
            _unlink(name)


def pack_header(line: bytes, body_size: int, max_blob: int) -> list[tuple[str, int]]:
    """The (id, size) pairs of a pack's header LINE, each checked, and checked against the
    body: BODY_SIZE bytes in all (the header line and its newline included). A size over
    MAX_BLOB is refused with 413, anything else malformed with InvalidObject."""
    try:
        header = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise InvalidObject(
            "a pack's first line is its header: JSON {blobs: [[id, size]]}"
        ) from None
    if not isinstance(header, dict) or set(header) != {"blobs"}:
        raise InvalidObject(
            f"a pack's header is {received.shown(header)}: {{blobs: [[id, size]]}}"
        )
    entries = received.listing(header["blobs"], "a pack's blobs")
    if len(entries) > PACK_BLOBS:
        raise InvalidObject(f"a pack of {len(entries)} blobs: at most {PACK_BLOBS}")
    out: dict[str, int] = {}
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 2):
            raise InvalidObject(f"a pack entry is {received.shown(entry)}: [id, size]")
        blob_id = received.hex64(entry[0], "a pack entry's id")
        size = received.whole(entry[1], f"blob {blob_id[:12]}'s size")
        if size > max_blob:
            raise HTTPException(
                413, f"blob {blob_id[:12]} is {size} bytes: over the limit of {max_blob} a blob"
            )
        if blob_id in out:
            raise InvalidObject(f"blob {blob_id[:12]} is twice in the pack")
        out[blob_id] = size
    expected = len(line) + 1 + sum(out.values())
    if expected != body_size:
        raise InvalidObject(
            f"the pack's body is {body_size} bytes, its header announces {expected}: "
            "nothing stored"
        )
    return list(out.items())


class PackReader:
    """A pack's body, read exactly: its header line, then SIZE bytes at a time, from a stream
    of chunks of any length."""

    def __init__(self, chunks: AsyncIterator[bytes]):
        self._chunks = chunks.__aiter__()
        self._buf = b""

    async def _more(self) -> bool:
        try:
            self._buf += await self._chunks.__anext__()
        except StopAsyncIteration:
            return False
        return True

    async def header_line(self) -> bytes:
        while b"\n" not in self._buf[: PACK_HEADER + 1]:
            if len(self._buf) > PACK_HEADER or not await self._more():
                raise InvalidObject(
                    f"a pack starts with its header, a line of at most {PACK_HEADER} bytes"
                )
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    async def take(self, size: int) -> AsyncIterator[bytes]:
        """The next SIZE bytes; InvalidObject when the body ends before them."""
        while size > 0:
            if not self._buf and not await self._more():
                raise InvalidObject(f"the pack's body ended {size} bytes short")
            piece, self._buf = self._buf[:size], self._buf[size:]
            size -= len(piece)
            yield piece


def verified_chunks(store: ObjectStore, blob_id: str) -> Iterator[bytes]:
    """The blob's bytes, hashed as they are read; the last chunk is held back until the hash
    is known, so a damaged blob is never sent whole (the response breaks off instead)."""
    digest = hashlib.sha256()
    with store.open(blob_id) as f:
        chunk = f.read(CHUNK)
        while True:
            digest.update(chunk)
            following = f.read(CHUNK)
            if not following and digest.hexdigest() != blob_id:
                log.error("blob %s is corrupt in the store; run `mint fsck`", blob_id)
                raise BlobCorrupt(blob_id, digest.hexdigest())
            if chunk:
                yield chunk
            if not following:
                return
            chunk = following


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
