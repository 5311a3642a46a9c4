"""`MemoryObjectStore`: blobs in a dict, with the same rules as the local store.

For tests, and for tools that need a throwaway store. `local_path` spills a blob into a
private temp folder (read-only files, removed with the store), since callers such as the
runtime need a real file to memory-map.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import os
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from mint.store.base import CHUNK, BlobId, ChunkObserver, PutResult, check_blob_id
from mint.store.errors import BlobChanged, BlobCorrupt, BlobMissing

_temp_names = itertools.count()


class MemoryObjectStore:
    """Blobs in a dict, each with the time it was last written or touched."""

    def __init__(self) -> None:
        self._blobs: dict[BlobId, bytes] = {}
        self._mtimes: dict[BlobId, float] = {}
        self._temps: dict[str, float] = {}  # writes in progress: name -> start time
        self._lock = threading.RLock()
        self._spill_dir: Path | None = None

    def __repr__(self) -> str:
        return f"<MemoryObjectStore with {len(self._blobs)} blobs>"

    # --- writing ---------------------------------------------------------------

    def put(
        self,
        path: str | os.PathLike,
        *,
        blob_id: str | None = None,
        observer: ChunkObserver | None = None,
    ) -> PutResult:
        """Store the file at PATH, hashing the bytes as they are read (see ObjectStore)."""
        if blob_id is not None:
            blob_id = check_blob_id(blob_id)
            kept = self._keep_existing(blob_id)
            if kept is not None:
                return PutResult(blob_id, kept, False)
        name = f"blob-{next(_temp_names)}"
        self._temps[name] = time.time()
        try:
            data, actual = _read_hashed(path, observer)
            if blob_id is not None and actual != blob_id:
                raise BlobChanged(str(path), blob_id, actual)
            if observer is not None:
                observer.done(actual, len(data))
            return self._store(actual, data)
        finally:
            self._temps.pop(name, None)

    def put_bytes(self, data: bytes) -> PutResult:
        """Store DATA (see ObjectStore.put)."""
        return self._store(BlobId(hashlib.sha256(data).hexdigest()), bytes(data))

    def _store(self, blob_id: BlobId, data: bytes) -> PutResult:
        with self._lock:
            kept = self._keep_existing(blob_id)
            if kept is not None:
                return PutResult(blob_id, kept, False)
            self._blobs[blob_id] = data
            self._mtimes[blob_id] = time.time()
            self._drop_spill(blob_id)
        return PutResult(blob_id, len(data), True)

    def _keep_existing(self, blob_id: BlobId) -> int | None:
        """The size of a good stored copy, touched; None when absent or corrupt."""
        with self._lock:
            data = self._blobs.get(blob_id)
            if data is None:
                return None
            self._mtimes[blob_id] = time.time()
        return len(data) if hashlib.sha256(data).hexdigest() == blob_id else None

    # --- reading ---------------------------------------------------------------

    def _get(self, blob_id: str) -> bytes:
        try:
            return self._blobs[check_blob_id(blob_id)]
        except KeyError:
            raise BlobMissing(blob_id) from None

    def open(self, blob_id: str) -> BinaryIO:
        """A file object on the blob's bytes."""
        return io.BytesIO(self._get(blob_id))

    def local_path(self, blob_id: str) -> Path:
        """A read-only copy of the blob in this store's private temp folder."""
        data = self._get(blob_id)
        with self._lock:
            if self._spill_dir is None:
                self._spill_dir = Path(tempfile.mkdtemp(prefix="mint-memstore-"))
                weakref.finalize(self, shutil.rmtree, self._spill_dir, True)
            path = self._spill_dir / blob_id
            if not path.exists():
                tmp = path.with_name(path.name + ".tmp")
                tmp.write_bytes(data)
                os.chmod(tmp, 0o444)
                os.replace(tmp, path)
        return path

    def _drop_spill(self, blob_id: str) -> None:
        if self._spill_dir is not None:
            (self._spill_dir / blob_id).unlink(missing_ok=True)

    def has(self, blob_id: str) -> bool:
        """Whether the blob is stored."""
        return check_blob_id(blob_id) in self._blobs

    def verify(self, blob_id: str) -> None:
        """Re-hash the blob; raise BlobMissing or BlobCorrupt."""
        actual = hashlib.sha256(self._get(blob_id)).hexdigest()
        if actual != blob_id:
            raise BlobCorrupt(blob_id, actual)

    def size(self, blob_id: str) -> int:
        """The blob's size in bytes."""
        return len(self._get(blob_id))

    def mtime(self, blob_id: str) -> float:
        """When the blob was last written or touched (seconds since the epoch)."""
        try:
            return self._mtimes[check_blob_id(blob_id)]
        except KeyError:
            raise BlobMissing(blob_id) from None

    def iter(self) -> Iterator[BlobId]:
        """Every stored blob id, in order."""
        with self._lock:
            ids = sorted(self._blobs)
        yield from ids

    # --- upkeep ----------------------------------------------------------------

    def touch(self, blob_id: str) -> None:
        """Set the blob's mtime to now: gc's grace period covers it anew."""
        with self._lock:
            self._get(blob_id)
            self._mtimes[BlobId(blob_id)] = time.time()

    def delete(self, blob_id: str) -> None:
        """Remove the blob; nothing happens if it is absent."""
        with self._lock:
            self._blobs.pop(check_blob_id(blob_id), None)
            self._mtimes.pop(BlobId(blob_id), None)
            self._drop_spill(blob_id)

    def stale_temps(self, older_than: float) -> list[str]:
        """Names of writes in progress that started more than OLDER_THAN seconds ago."""
        cutoff = time.time() - older_than
        return sorted(name for name, started in list(self._temps.items()) if started < cutoff)

    def remove_temp(self, name: str) -> None:
        """Forget the write in progress NAME; nothing happens if it is gone."""
        self._temps.pop(name, None)


def _read_hashed(
    path: str | os.PathLike, observer: ChunkObserver | None = None
) -> tuple[bytes, BlobId]:
    """The file's bytes and their sha256, from one pass over the file."""
    digest, buf = hashlib.sha256(), bytearray()
    with open(path, "rb") as src:
        while chunk := src.read(CHUNK):
            if observer is not None:
                observer.update(chunk)
            digest.update(chunk)
            buf += chunk
    return bytes(buf), BlobId(digest.hexdigest())
