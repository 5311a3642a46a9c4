"""Content-addressed bytes. A blob's id is the sha256 hex of its bytes.

This package knows nothing of mint: it maps ids to files and keeps them durable.
Who refers to a blob is the metadata's business (see `mint.gc`).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, NewType, Protocol

BlobId = NewType("BlobId", str)

CHUNK = 4 * 1024 * 1024
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class StoreError(Exception):
    """Base of the store's errors."""

    exit_code = 1
    hint: str | None = "run `mint fsck`"


class BlobMissing(StoreError, FileNotFoundError):
    def __init__(self, blob_id: str):
        super().__init__(f"blob {blob_id[:12]} is missing from the object store")
        self.blob_id = blob_id


class BlobCorrupt(StoreError, ValueError):
    def __init__(self, blob_id: str, actual: str):
        super().__init__(f"blob {blob_id[:12]} is corrupt: its bytes hash to {actual[:12]}")
        self.blob_id, self.actual = blob_id, actual


def is_blob_id(value: str) -> bool:
    return bool(_HEX64.match(value))


def sha256_file(path: str | os.PathLike) -> str:
    """The sha256 hex of a file, read in large chunks."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@dataclass(frozen=True)
class PutResult:
    id: BlobId
    size: int
    written: bool  # False when the blob was already there


class ObjectStore(Protocol):
    def put(self, path: str | os.PathLike, *, blob_id: str | None = None) -> PutResult: ...
    def put_bytes(self, data: bytes) -> PutResult: ...
    def open(self, blob_id: str) -> BinaryIO: ...
    def local_path(self, blob_id: str) -> Path: ...
    def has(self, blob_id: str) -> bool: ...
    def verify(self, blob_id: str) -> None: ...
    def delete(self, blob_id: str) -> None: ...
    def iter(self) -> Iterator[BlobId]: ...


class LocalObjectStore:
    """Blobs as read-only files under `root/ab/cdef…`, written atomically and fsynced."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.tmp = self.root / "tmp"

    def _path(self, blob_id: str) -> Path:
        if not is_blob_id(blob_id):
            raise ValueError(f"not a blob id: {blob_id!r}")
        return self.root / blob_id[:2] / blob_id[2:]

    def local_path(self, blob_id: str) -> Path:
        path = self._path(blob_id)
        if not path.exists():
            raise BlobMissing(blob_id)
        return path

    def has(self, blob_id: str) -> bool:
        return self._path(blob_id).exists()

    def open(self, blob_id: str) -> BinaryIO:
        try:
            return open(self._path(blob_id), "rb")
        except FileNotFoundError:
            raise BlobMissing(blob_id) from None

    def put(self, path: str | os.PathLike, *, blob_id: str | None = None) -> PutResult:
        """Store the file at `path`. With `blob_id` (already hashed by the caller), an
        existing blob is skipped without reading the file, and a new one is copied
        with the kernel's copy and checked to be unchanged since it was hashed."""
        before = os.stat(path)
        if blob_id is not None and self.has(blob_id):
            self._touch(blob_id)
            return PutResult(BlobId(blob_id), before.st_size, False)
        if blob_id is None:
            return self._put_stream(path)
        tmp = self._tempfile()
        try:
            with open(path, "rb") as src, open(tmp, "wb") as dst:
                _copy(src, dst, before.st_size)
                dst.flush()
                os.fsync(dst.fileno())
            after = os.stat(path)
            if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
                raise StoreError(f"{path} changed while it was being stored")
            return self._publish(tmp, BlobId(blob_id), before.st_size)
        finally:
            _unlink(tmp)

    def _put_stream(self, path: str | os.PathLike) -> PutResult:
        tmp = self._tempfile()
        try:
            digest = hashlib.sha256()
            size = 0
            with open(path, "rb") as src, open(tmp, "wb") as dst:
                while chunk := src.read(CHUNK):
                    digest.update(chunk)
                    dst.write(chunk)
                    size += len(chunk)
                dst.flush()
                os.fsync(dst.fileno())
            return self._publish(tmp, BlobId(digest.hexdigest()), size)
        finally:
            _unlink(tmp)

    def put_bytes(self, data: bytes) -> PutResult:
        blob_id = BlobId(hashlib.sha256(data).hexdigest())
        if self.has(blob_id):
            self._touch(blob_id)
            return PutResult(blob_id, len(data), False)
        tmp = self._tempfile()
        try:
            with open(tmp, "wb") as dst:
                dst.write(data)
                dst.flush()
                os.fsync(dst.fileno())
            return self._publish(tmp, blob_id, len(data))
        finally:
            _unlink(tmp)

    def _touch(self, blob_id: str) -> None:
        # A blob about to be referenced again is young again: gc's grace period covers it.
        try:
            os.utime(self._path(blob_id))
        except FileNotFoundError:
            pass

    def _tempfile(self) -> Path:
        self.tmp.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=self.tmp, prefix="blob-")
        os.close(fd)
        return Path(name)

    def _publish(self, tmp: Path, blob_id: BlobId, size: int) -> PutResult:
        final = self._path(blob_id)
        if final.exists():
            self._touch(blob_id)
            return PutResult(blob_id, size, False)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(tmp, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        os.replace(tmp, final)
        _fsync_dir(final.parent)
        return PutResult(blob_id, size, True)

    def verify(self, blob_id: str) -> None:
        """Re-hash the blob; raise BlobMissing or BlobCorrupt."""
        try:
            actual = sha256_file(self._path(blob_id))
        except FileNotFoundError:
            raise BlobMissing(blob_id) from None
        if actual != blob_id:
            raise BlobCorrupt(blob_id, actual)

    def size(self, blob_id: str) -> int:
        try:
            return self._path(blob_id).stat().st_size
        except FileNotFoundError:
            raise BlobMissing(blob_id) from None

    def mtime(self, blob_id: str) -> float:
        return self._path(blob_id).stat().st_mtime

    def delete(self, blob_id: str) -> None:
        _unlink(self._path(blob_id))

    def iter(self) -> Iterator[BlobId]:
        if not self.root.exists():
            return
        for sub in sorted(self.root.iterdir()):
            if len(sub.name) != 2 or not sub.is_dir():
                continue
            for f in sorted(sub.iterdir()):
                blob_id = sub.name + f.name
                if is_blob_id(blob_id):
                    yield BlobId(blob_id)

    def stale_temps(self, older_than: float) -> list[Path]:
        """Temp files left by writers that died, older than `older_than` seconds."""
        if not self.tmp.exists():
            return []
        cutoff = time.time() - older_than
        return [p for p in self.tmp.iterdir() if p.stat().st_mtime < cutoff]


def _copy(src: BinaryIO, dst: BinaryIO, size: int) -> None:
    """Copy in the kernel where it can (copy_file_range), else through user space."""
    try:
        offset = 0
        while offset < size:
            n = os.copy_file_range(src.fileno(), dst.fileno(), size - offset)
            if n == 0:
                break
            offset += n
        if offset == size:
            return
    except OSError:
        pass
    src.seek(0)
    dst.seek(0)
    dst.truncate()
    while chunk := src.read(CHUNK):
        dst.write(chunk)


def copy_out(store: ObjectStore, blob_id: str, dest: str | os.PathLike) -> None:
    """Write a blob's bytes to a new file at `dest` (used by checkout)."""
    src_path = store.local_path(blob_id)
    size = src_path.stat().st_size
    with open(src_path, "rb") as src, open(dest, "xb") as dst:
        _copy(src, dst, size)


def _unlink(path: Path) -> None:
    try:
        os.chmod(path, stat.S_IWUSR | stat.S_IRUSR)
        os.unlink(path)
    except FileNotFoundError:
        pass


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
