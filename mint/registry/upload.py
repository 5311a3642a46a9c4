"""Receiving and sending blob bytes: streamed, hashed on the way, never whole in memory.

An upload goes to a temp file beside the store's own temp files (locked while it is written,
so that gc removes it only once its writer is gone), is hashed as it arrives and is handed to
the store only if it hashes to its id; otherwise nothing is stored.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from starlette.concurrency import run_in_threadpool

from mint.errors import BlobCorrupt, InvalidObject
from mint.repo import Repo
from mint.store import ObjectStore
from mint.store.base import CHUNK, PutResult

log = logging.getLogger("mint.registry")


def upload_folder(repo: Repo) -> Path:
    """The store's temp folder when it has one (gc cleans it), else .mint/tmp."""
    folder = Path(getattr(repo.store, "tmp", None) or repo.mint_dir / "tmp")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def receive_blob(repo: Repo, chunks: AsyncIterator[bytes], blob_id: str) -> PutResult:
    """Store the bytes of CHUNKS as blob BLOB_ID if they hash to it (InvalidObject if not)."""
    fd, name = tempfile.mkstemp(dir=upload_folder(repo), prefix="upload-")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        digest, size = hashlib.sha256(), 0
        async for chunk in chunks:
            digest.update(chunk)
            _write_all(fd, chunk)
            size += len(chunk)
        actual = digest.hexdigest()
        if actual != blob_id:
            raise InvalidObject(
                f"the {size} bytes sent hash to {actual[:12]}, not {blob_id[:12]}: nothing stored"
            )
        return await run_in_threadpool(repo.store.put, name, blob_id=blob_id)
    finally:
        os.close(fd)
        _unlink(name)


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
