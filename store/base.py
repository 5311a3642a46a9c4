"""What every object store shares: blob ids, the `ObjectStore` protocol, and `copy_out`.

A blob's id is the sha256 hex of its bytes. Stores map ids to bytes; they never know who
refers to a blob. Everything here works on any store, local or remote.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NewType, Protocol, runtime_checkable

from mint.store.errors import BlobCorrupt

BlobId = NewType("BlobId", str)

CHUNK = 1024 * 1024
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def is_blob_id(value: str) -> bool:
    """True for a full sha256 hex id (64 lowercase hex digits)."""
    return isinstance(value, str) and bool(_HEX64.match(value))


def check_blob_id(value: str) -> BlobId:
    """VALUE as a BlobId; ValueError if it is not one (ids become paths and keys)."""
    if not is_blob_id(value):
        raise ValueError(f"not a blob id: {value!r}")
    return BlobId(value)


_SYNC_FILE_RANGE_WRITE = 2  # start writeback of the range; do not wait for it


@functools.cache
def _sync_file_range():
    """Linux's sync_file_range from the C library, or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes  # on first use: a command that writes no blob does not load it

        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return fn


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing a range of FD to disk, without waiting: a later fsync
    then finds the work done. Only a hint: where it is not available, nothing happens."""
    fn = _sync_file_range()
    if fn is not None:
        fn(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


def sha256_file(path: str | os.PathLike) -> str:
    """The sha256 hex of a file, read in large chunks."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@dataclass(frozen=True)
class PutResult:
    """What a put stored: the id, the size, and whether bytes were written."""

    id: BlobId
    size: int
    written: bool  # False when a good copy was already there


class ChunkObserver(Protocol):
    """Sees the bytes a put copies, in order, in the same pass: what a caller would
    otherwise read the file again for (other hashes, checks of the contents)."""

    def update(self, chunk: bytes) -> None:
        """The next chunk of the file; a bytes object the observer may keep."""

    def done(self, blob_id: BlobId, size: int) -> None:
        """Every byte was seen. Raising here refuses the put: nothing is published."""


@runtime_checkable
class ObjectStore(Protocol):
    """Content-addressed bytes. Every method that takes an id raises ValueError for a
    string that is not one, and BlobMissing where a blob must exist and does not.

    Optional, where a store has them: `presigned_url(blob_id, expires)` (a URL that reads
    the blob without credentials: the registry redirects downloads to it) and
    `delete_many(blob_ids)` (one request for many deletions: gc uses it)."""

    def put(
        self,
        path: str | os.PathLike,
        *,
        blob_id: str | None = None,
        observer: ChunkObserver | None = None,
    ) -> PutResult:
        """Store the file's bytes, hashed as they are copied.

        With `blob_id` (the caller's hash), bytes that hash otherwise raise BlobChanged and
        nothing is stored. A blob already stored is re-hashed: a good one is only touched,
        a corrupt one is replaced by the new bytes. An `observer` sees every byte copied
        and may refuse the put in its `done`; with `blob_id` of a good stored blob nothing
        is copied, and the observer sees nothing."""

    def put_bytes(self, data: bytes) -> PutResult:
        """Store DATA; same rules as `put`."""

    def open(self, blob_id: str) -> BinaryIO:
        """A binary file object that reads the blob (not verified: see `copy_out`)."""

    def local_path(self, blob_id: str) -> Path:
        """A read-only file on local disk that holds the blob's bytes."""

    def has(self, blob_id: str) -> bool:
        """Whether the blob is stored."""

    def verify(self, blob_id: str) -> None:
        """Re-hash the blob; raise BlobMissing or BlobCorrupt."""

    def delete(self, blob_id: str) -> None:
        """Remove the blob; nothing happens if it is absent."""

    def iter(self) -> Iterator[BlobId]:
        """Every stored blob id."""

    def size(self, blob_id: str) -> int:
        """The blob's size in bytes."""

    def mtime(self, blob_id: str) -> float:
        """When the blob was last written or touched, in seconds since the epoch."""

    def touch(self, blob_id: str) -> None:
        """Make the blob young again, so that gc's grace period covers it anew."""

    def stale_temps(self, older_than: float) -> list[str]:
        """Names of temp files, left by writers that died, older than OLDER_THAN seconds."""

    def remove_temp(self, name: str) -> None:
        """Remove one temp file named by `stale_temps`; nothing happens if it is gone."""


def copy_out(
    store: ObjectStore,
    blob_id: str,
    dest: str | os.PathLike,
    advance: Callable[[int], object] | None = None,
) -> int:
    """Write a blob's bytes to a new file at DEST, hashing them on the way; ADVANCE, if
    given, is called with each chunk's length (a progress bar).

    DEST must not exist (FileExistsError). If the bytes do not hash to BLOB_ID, DEST is
    removed and BlobCorrupt is raised. Returns the number of bytes written."""
    digest = hashlib.sha256()
    size = 0
    with store.open(blob_id) as src:
        with open(dest, "xb") as dst:
            try:
                while chunk := src.read(CHUNK):
                    digest.update(chunk)
                    dst.write(chunk)
                    size += len(chunk)
                    if advance is not None:
                        advance(len(chunk))
                if digest.hexdigest() != blob_id:
                    raise BlobCorrupt(blob_id, digest.hexdigest())
            except BaseException:
                dst.close()
                os.unlink(dest)
                raise
    return size
