"""`BlobCache`: a local, content-addressed, verified cache of blobs with a size bound (LRU).

A remote store hands out local files through it: a blob is downloaded once, hashed on the
way, and renamed into `root/ab/cdef…` (read-only) only if its bytes hash to its id. Each
use stamps the file's mtime; when the cache grows past its bound, the files used longest
ago go first (never the one just handed out).
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from mint.store.base import BlobId, check_blob_id
from mint.store.errors import BlobCorrupt

READ_ONLY = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
DEFAULT_CACHE_BYTES = 10 * 1024**3
STALE_TEMP_SECONDS = 24 * 3600


class BlobCache:
    """Verified copies of blobs under ROOT, at most MAX_BYTES in all (LRU)."""

    def __init__(self, root: str | os.PathLike, max_bytes: int = DEFAULT_CACHE_BYTES):
        self.root = Path(root)
        self.tmp = self.root / "tmp"
        self.max_bytes = max_bytes

    def path(self, blob_id: str) -> Path:
        check_blob_id(blob_id)
        return self.root / blob_id[:2] / blob_id[2:]

    def get(self, blob_id: str) -> Path | None:
        """The cached file, stamped as just used; None when it is not cached."""
        path = self.path(blob_id)
        try:
            _stamp(path)
        except FileNotFoundError:
            return None
        return path

    def fill(self, blob_id: str, chunks: Iterable[bytes]) -> Path:
        """Write CHUNKS as BLOB_ID's file, if they hash to it (else BlobCorrupt, nothing
        kept); then evict the files used longest ago beyond the bound."""
        final = self.path(blob_id)
        self.tmp.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=self.tmp, prefix="fill-")
        try:
            with os.fdopen(fd, "wb") as out:
                digest = hashlib.sha256()
                for chunk in chunks:
                    digest.update(chunk)
                    out.write(chunk)
                os.fchmod(out.fileno(), READ_ONLY)
            if digest.hexdigest() != blob_id:
                raise BlobCorrupt(blob_id, digest.hexdigest())
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(name, final)
            _stamp(final)
        finally:
            _unlink(Path(name))
        self.evict(keep=BlobId(blob_id))
        return final

    def drop(self, blob_id: str) -> None:
        """Forget BLOB_ID's file, if any."""
        _unlink(self.path(blob_id))

    def evict(self, keep: BlobId | None = None) -> list[BlobId]:
        """Remove the files used longest ago until the cache fits its bound; KEEP stays.
        Also clears temp files of fills that died. Returns the ids removed."""
        self._clear_stale_temps()
        entries = []
        for sub in self.root.iterdir() if self.root.exists() else ():
            if len(sub.name) != 2 or not sub.is_dir():
                continue
            for f in sub.iterdir():
                try:
                    st = f.stat()
                except FileNotFoundError:
                    continue
                entries.append((st.st_mtime, st.st_size, BlobId(sub.name + f.name), f))
        total = sum(e[1] for e in entries)
        removed = []
        for _, size, blob_id, f in sorted(entries):
            if total <= self.max_bytes:
                break
            if blob_id != keep:
                _unlink(f)
                total -= size
                removed.append(blob_id)
        return removed

    def _clear_stale_temps(self) -> None:
        cutoff = time.time() - STALE_TEMP_SECONDS
        for f in self.tmp.iterdir() if self.tmp.exists() else ():
            try:
                if f.stat().st_mtime < cutoff:
                    _unlink(f)
            except FileNotFoundError:
                continue


def _stamp(path: Path) -> None:
    now = time.time_ns()
    os.utime(path, ns=(now, now))


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
