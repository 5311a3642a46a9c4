"""`LocalObjectStore`: blobs as read-only files under `root/ab/cdef…`.

A write goes to a temp file in `root/tmp/`, hashed as it is written, fsynced, made
read-only and renamed into place, so a blob file is always whole and always the bytes of
its id (unless the disk itself corrupts it: `verify` and a later `put` catch and repair
that). Temp files of writers that died stay in `root/tmp/` until gc removes them.
"""

from __future__ import annotations

import collections
import errno
import fcntl
import hashlib
import os
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from mint.store.base import (
    CHUNK,
    BlobId,
    ChunkObserver,
    PutResult,
    check_blob_id,
    is_blob_id,
    start_writeback,
)
from mint.store.errors import BlobChanged, BlobCorrupt, BlobMissing

if TYPE_CHECKING:  # the thread pool is imported when a large file is written
    from concurrent.futures import Future, ThreadPoolExecutor

READ_ONLY = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
WRITEBACK_EVERY = 8 * 1024 * 1024
COPY_CHUNK = 4 * 1024 * 1024  # copied by the kernel, then read back and hashed, at a time


class LocalObjectStore:
    """Blobs as read-only files under `root/ab/cdef…`, written atomically and fsynced."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.tmp = self.root / "tmp"

    def __repr__(self) -> str:
        return f"LocalObjectStore({str(self.root)!r})"

    def _path(self, blob_id: str) -> Path:
        check_blob_id(blob_id)
        return self.root / blob_id[:2] / blob_id[2:]

    # --- writing ---------------------------------------------------------------

    def put(
        self,
        path: str | os.PathLike,
        *,
        blob_id: str | None = None,
        observer: ChunkObserver | None = None,
    ) -> PutResult:
        """Store the file at PATH, hashing the bytes as they are copied (see ObjectStore)."""
        if blob_id is not None:
            blob_id = check_blob_id(blob_id)
            kept = self._keep_existing(blob_id)
            if kept is not None:
                return PutResult(blob_id, kept, False)
        with _Temp(self.tmp) as temp:
            actual, size = temp.copy(path, observer)
            if blob_id is not None and actual != blob_id:
                raise BlobChanged(str(path), blob_id, actual)
            if observer is not None:
                observer.done(actual, size)
            if blob_id is None:
                kept = self._keep_existing(actual)
                if kept is not None:
                    return PutResult(actual, kept, False)
            return self._publish(temp, actual, size)

    def stage(
        self,
        path: str | os.PathLike,
        *,
        observer: ChunkObserver | None = None,
        prefix: str = "blob-",
    ) -> Staged:
        """`put` in two halves: copy and hash the file at PATH into a temp file, synced to
        disk, now (OBSERVER sees the bytes, and may refuse them in `done`); publish it, or drop
        it, later (`Staged.publish`, `Staged.discard`). What a commit started before its
        checks are over uses: nothing is in the store until they passed. PREFIX starts the
        temp file's name (`remove_leftovers` finds a dead writer's by it)."""
        temp = _Temp(self.tmp, prefix)
        try:
            actual, size = temp.copy(path, observer)
            if observer is not None:
                observer.done(actual, size)
            os.fsync(temp.fd)
        except BaseException:
            temp.__exit__()
            raise
        return Staged(self, temp, actual, size)

    def put_bytes(self, data: bytes) -> PutResult:
        """Store DATA (see ObjectStore.put)."""
        blob_id = BlobId(hashlib.sha256(data).hexdigest())
        kept = self._keep_existing(blob_id)
        if kept is not None:
            return PutResult(blob_id, kept, False)
        with _Temp(self.tmp) as temp:
            _, size = temp.write([data])
            return self._publish(temp, blob_id, size)

    def _keep_existing(self, blob_id: BlobId) -> int | None:
        """The size of a good stored copy, touched first so gc spares it; None when the
        blob is absent or corrupt (then the caller writes it)."""
        try:
            self.touch(blob_id)
            with open(self._path(blob_id), "rb") as f:
                good = hashlib.file_digest(f, "sha256").hexdigest() == blob_id
                return os.fstat(f.fileno()).st_size if good else None
        except FileNotFoundError:  # BlobMissing too: gone, perhaps just now
            return None

    def _publish(self, temp: _Temp, blob_id: BlobId, size: int, synced: bool = False) -> PutResult:
        """Rename a verified temp file into place; it replaces a corrupt copy, if any."""
        final = self._path(blob_id)
        final.parent.mkdir(parents=True, exist_ok=True)
        if not synced:  # here, not while writing: a temp that is dropped is never synced
            os.fsync(temp.fd)
        os.fchmod(temp.fd, READ_ONLY)
        _set_mtime_now(temp.fd)
        os.replace(temp.path, final)
        temp.published = True
        _fsync_dir(final.parent)
        return PutResult(blob_id, size, True)

    # --- reading ---------------------------------------------------------------

    def open(self, blob_id: str) -> BinaryIO:
        """A file object on the blob's bytes."""
        try:
            return open(self._path(blob_id), "rb")
        except FileNotFoundError:
            raise BlobMissing(blob_id) from None

    def local_path(self, blob_id: str) -> Path:
        """The blob's own read-only file."""
        path = self._path(blob_id)
        if not path.exists():
            raise BlobMissing(blob_id)
        return path

    def has(self, blob_id: str) -> bool:
        """Whether the blob is stored."""
        return self._path(blob_id).exists()

    def verify(self, blob_id: str) -> None:
        """Re-hash the blob; raise BlobMissing or BlobCorrupt."""
        with self.open(blob_id) as f:
            actual = hashlib.file_digest(f, "sha256").hexdigest()
        if actual != blob_id:
            raise BlobCorrupt(blob_id, actual)

    def size(self, blob_id: str) -> int:
        """The blob's size in bytes."""
        return self._stat(blob_id).st_size

    def mtime(self, blob_id: str) -> float:
        """When the blob was last written or touched (seconds since the epoch)."""
        return self._stat(blob_id).st_mtime

    def _stat(self, blob_id: str) -> os.stat_result:
        try:
            return self._path(blob_id).stat()
        except FileNotFoundError:
            raise BlobMissing(blob_id) from None

    def iter(self) -> Iterator[BlobId]:
        """Every stored blob id, in order."""
        if not self.root.exists():
            return
        for sub in sorted(self.root.iterdir()):
            if len(sub.name) != 2 or not sub.is_dir():
                continue
            for f in sorted(sub.iterdir()):
                if is_blob_id(sub.name + f.name):
                    yield BlobId(sub.name + f.name)

    # --- upkeep ----------------------------------------------------------------

    def touch(self, blob_id: str) -> None:
        """Set the blob's mtime to now: gc's grace period covers it anew."""
        try:
            _set_mtime_now(self._path(blob_id))
        except FileNotFoundError:
            raise BlobMissing(blob_id) from None

    def delete(self, blob_id: str) -> None:
        """Remove the blob; nothing happens if it is absent."""
        _unlink(self._path(blob_id))

    def stale_temps(self, older_than: float) -> list[str]:
        """Names of temp files in `root/tmp/` older than OLDER_THAN seconds whose writer
        is gone (a live writer holds a lock on its temp file)."""
        cutoff = time.time() - older_than
        try:
            entries = list(self.tmp.iterdir())
        except FileNotFoundError:
            return []
        stale = []
        for entry in entries:
            try:
                if entry.stat().st_mtime < cutoff and not _locked(entry):
                    stale.append(entry.name)
            except FileNotFoundError:
                continue  # its writer finished meanwhile
        return sorted(stale)

    def adopt(self, fd: int, path: str, blob_id: str, size: int) -> Staged:
        """The `Staged` blob another process staged in this store and handed over: FD, the
        open temp file at PATH (its lock came with it), holding SIZE bytes that hash to
        BLOB_ID, as that process says. PATH must be a temp file of this store, and FD that
        very file (ValueError otherwise); the bytes are those the stager hashed, as the file
        is locked and read-only to other mint writers."""
        temp = Path(path)
        if temp.parent != self.tmp or not temp.name.startswith("blob-"):
            raise ValueError(f"not a temp file of {self}: {path!r}")
        here, there = os.fstat(fd), temp.stat()
        if (here.st_dev, here.st_ino) != (there.st_dev, there.st_ino) or here.st_size != size:
            raise ValueError(f"the handed-over file is not {path!r} as staged")
        return Staged(self, _Temp.adopted(fd, temp), check_blob_id(blob_id), size)

    def remove_leftovers(self, prefix: str) -> None:
        """Remove the temp files named PREFIX... whose writer is gone (a writer that died
        before it handed them over): those of a live writer stay."""
        try:
            names = [e.name for e in self.tmp.iterdir() if e.name.startswith(prefix)]
        except FileNotFoundError:
            return
        for name in names:
            self.remove_temp(name)

    def remove_temp(self, name: str) -> None:
        """Remove the temp file NAME (a bare name from `stale_temps`); one whose writer
        is alive, or that is gone, is left alone."""
        if not name or name in (".", "..") or Path(name).name != name:
            raise ValueError(f"not a temp file name: {name!r}")
        path = self.tmp / name
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _unlink(path)
        except BlockingIOError:
            pass  # its writer is alive
        finally:
            os.close(fd)


class Staged:
    """A blob copied, hashed and synced into a temp file of STORE (`LocalObjectStore.stage`),
    not yet in the store: `publish` renames it into place, `discard` removes it. A process
    that dies in between leaves a temp file that gc removes."""

    def __init__(self, store: LocalObjectStore, temp: _Temp, blob_id: BlobId, size: int):
        self.store, self.temp, self.id, self.size = store, temp, blob_id, size
        self.closed = False

    def __repr__(self) -> str:
        return f"Staged({self.id[:12]}, {self.size})"

    def publish(self) -> PutResult:
        """Into the store (a good copy already there is kept, and this one dropped)."""
        if self.closed:
            raise ValueError("a staged blob is published or discarded once")
        try:
            kept = self.store._keep_existing(self.id)
            if kept is not None:
                return PutResult(self.id, kept, False)
            return self.store._publish(self.temp, self.id, self.size, synced=True)
        finally:
            self.discard()

    def discard(self) -> None:
        """Drop the temp file (nothing, once published)."""
        if not self.closed:
            self.closed = True
            self.temp.__exit__()


class _Temp:
    """A new temp file, locked by its writer until it is published or removed.

    The lock is how `stale_temps` tells a live writer's file from one left by a writer
    that died: the kernel releases a dead process's locks."""

    def __init__(self, folder: Path, prefix: str = "blob-"):
        folder.mkdir(parents=True, exist_ok=True)
        self.fd, name = tempfile.mkstemp(dir=folder, prefix=prefix)
        self.path = Path(name)
        self.published = False
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    @classmethod
    def adopted(cls, fd: int, path: Path) -> _Temp:
        """The temp file another writer made and handed over, open (and locked) as FD."""
        temp = cls.__new__(cls)
        temp.fd, temp.path, temp.published = fd, path, False
        return temp

    def __enter__(self) -> _Temp:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.published:
            _unlink(self.path)
        os.close(self.fd)

    def write(
        self, chunks: Iterable[bytes], observer: ChunkObserver | None = None
    ) -> tuple[BlobId, int]:
        """Write CHUNKS, hashing them (and showing them to OBSERVER). Returns (sha256, size).

        The writing runs on a thread of its own, a few chunks behind the hashing, and the
        kernel starts writeback behind it, so that the fsync at publishing finds little left
        to do: the disk and the copy work while the hash is computed."""
        digest, size = hashlib.sha256(), 0
        with _WriteBehind(self.fd) as writer:
            for chunk in chunks:
                if observer is not None:
                    observer.update(chunk)
                writer.write(chunk)
                digest.update(chunk)
                size += len(chunk)
        return BlobId(digest.hexdigest()), size

    def copy(
        self, path: str | os.PathLike, observer: ChunkObserver | None = None
    ) -> tuple[BlobId, int]:
        """Copy the file at PATH in, hashing (and showing OBSERVER) the bytes as they are
        in this file: each chunk is copied by the kernel (`copy_file_range`, no copy through
        this process) and read back from the page cache, so what is hashed is what was
        written. Where the kernel cannot copy between these files, read and `write`."""
        with open(path, "rb") as src:
            try:
                first = _copy_range(src.fileno(), self.fd, 0)
            except OSError as exc:
                if exc.errno not in _NO_COPY_RANGE:
                    raise
                return self.write(_chunks_of(src), observer)
            return self._hash_copied(src.fileno(), first, observer)

    def _hash_copied(self, src: int, n: int, observer) -> tuple[BlobId, int]:
        digest, size, flushed = hashlib.sha256(), 0, 0
        while n:
            chunk = os.pread(self.fd, n, size)
            if len(chunk) != n:
                raise OSError(f"{self.path}: {len(chunk)} bytes read back of {n} written")
            if observer is not None:
                observer.update(chunk)
            digest.update(chunk)
            size += n
            if size - flushed >= WRITEBACK_EVERY:  # the disk starts while the rest is hashed
                start_writeback(self.fd, flushed, size - flushed)
                flushed = size
            n = _copy_range(src, self.fd, size)
        return BlobId(digest.hexdigest()), size


def _copy_range(src: int, dst: int, offset: int) -> int:
    """Copy up to COPY_CHUNK bytes at OFFSET of SRC to the same offset of DST, in the kernel."""
    if not hasattr(os, "copy_file_range"):  # not Linux
        raise OSError(errno.ENOSYS, "copy_file_range")
    return os.copy_file_range(src, dst, COPY_CHUNK, offset, offset)


# copy_file_range's errors where the kernel or the file systems cannot copy between the files.
_NO_COPY_RANGE = {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF}


class _WriteBehind:
    """Writes chunks at their offsets in FD on one thread, at most DEPTH chunks behind the
    caller. The first chunk is written in place: a small file starts no thread."""

    def __init__(self, fd: int, depth: int = 4):
        self.fd, self.depth = fd, depth
        self.size = self.flushed = 0
        self.pool: ThreadPoolExecutor | None = None
        self.pending: collections.deque[Future] = collections.deque()

    def __enter__(self) -> _WriteBehind:
        return self

    def __exit__(self, kind, *exc) -> None:
        try:  # every write is over before the file is published or closed
            while self.pending:
                self.pending.popleft().result()
        except Exception:
            if kind is None:
                raise
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True)

    def write(self, chunk: bytes) -> None:
        offset, self.size = self.size, self.size + len(chunk)
        if offset == 0:
            self._write(chunk, offset)
            return
        if self.pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self.pool = ThreadPoolExecutor(1, thread_name_prefix="mint-store-write")
        self.pending.append(self.pool.submit(self._write, chunk, offset))
        if len(self.pending) > self.depth:
            self.pending.popleft().result()

    def _write(self, chunk: bytes, offset: int) -> None:
        view = memoryview(chunk)
        while view:
            n = os.pwrite(self.fd, view, offset)
            view, offset = view[n:], offset + n
        if offset - self.flushed >= WRITEBACK_EVERY:
            start_writeback(self.fd, self.flushed, offset - self.flushed)
            self.flushed = offset


def _chunks_of(src: BinaryIO) -> Iterator[bytes]:
    while chunk := src.read(CHUNK):
        yield chunk


def _locked(path: Path) -> bool:
    """Whether a live writer holds PATH's lock."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _set_mtime_now(target: int | Path) -> None:
    """Stamp the mtime from the same clock gc reads (the kernel's own stamp is coarser,
    and can fall a tick behind `time.time()`)."""
    now = time.time_ns()
    os.utime(target, ns=(now, now))


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
