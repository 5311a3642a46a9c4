"""A commit's one pass over an adapter's bytes: each file is hashed as it is copied into the
store, the weights' tensors are hashed and their values checked in that same pass, and what
was learnt goes into the stat cache, so that the next commit of an unchanged file reads none
of it.

The store reads and hashes the file while its writer thread copies it, and the tensor work
runs a few chunks behind on a thread of its own (hashlib, numpy and the writes release the
GIL): the work of one pass is spread over the cores there are. Nothing is published unless
every check passed: the tensor half refuses in the store's `done` callback, before the temp
file is renamed into place.
"""

from __future__ import annotations

import atexit
import collections
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from mint.commits.adapter import (
    CONFIG,
    WEIGHTS,
    HashedAdapter,
    ScannedAdapter,
    ScannedFile,
    scan_adapter,
)
from mint.commits.safetensors import TensorPass
from mint.commits.statcache import FileStat, Known, StatCache
from mint.errors import InvalidAdapter
from mint.store import BlobId, ObjectStore
from mint.store.local import Staged

DEPTH = 4  # chunks the tensor thread may fall behind (bounds the memory held)


def known_files(scanned: ScannedAdapter, cache: StatCache) -> dict[str, Known]:
    """The files the stat cache vouches for, by path: the config and the weights only with
    what the scan read of them (and the weights with a hash for every tensor it found)."""
    found = {}
    names = {t.name for t in scanned.header.tensors}
    for f in scanned.files:
        known = cache.get(f.abspath, f.stat)
        if known is None:
            continue
        if f.path == CONFIG and known.head != scanned.config_raw:
            continue
        if f.path == WEIGHTS and (
            known.head != scanned.header.raw or set(known.tensors or ()) != names
        ):
            continue
        found[f.path] = known
    return found


def from_cache(scanned: ScannedAdapter, known: dict[str, Known]) -> HashedAdapter | None:
    """Every file's hashes from the stat cache, or None if it does not know them all."""
    if len(known) != len(scanned.files):
        return None
    blobs = {p: k.blob for p, k in known.items()}
    return HashedAdapter(scanned, blobs, dict(known[WEIGHTS].tensors))


def ingest(
    scanned: ScannedAdapter, store: ObjectStore, cache: StatCache, known: dict[str, Known]
) -> tuple[HashedAdapter, int]:
    """Store every file of SCANNED, reading and hashing those the cache does not know in the
    pass that copies them; the weights first, as they are the ones that may be refused.
    What a read-ahead of these same files already copied (`read_ahead`) is published instead.
    Returns the hashes and the bytes written into the store."""
    blobs: dict[str, str] = {}
    tensors: dict[str, str] = dict((known.get(WEIGHTS) or Known("")).tensors or {})
    written = 0
    ahead = claim(scanned, store)
    staged = ahead.staged if ahead is not None else {}
    order = sorted(scanned.files, key=lambda f: f.path != WEIGHTS)
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="mint-tensors") as pool:
            for f in order:
                if f.path in known:
                    blobs[f.path] = known[f.path].blob
                    written += _written(store.put(f.abspath, blob_id=blobs[f.path]))
                    continue
                if f.path in staged:
                    blob, learnt = staged.pop(f.path)
                    n, seen_ns = _written(blob.publish()), ahead.scanned.seen_ns
                else:
                    (learnt, n), seen_ns = _store_file(scanned, f, store, pool), scanned.seen_ns
                blobs[f.path], written = learnt.blob, written + n
                if f.path == WEIGHTS:
                    tensors = learnt.tensors
                _remember(cache, seen_ns, f, learnt)
    finally:
        for blob, _ in staged.values():
            blob.discard()
    return HashedAdapter(scanned, blobs, tensors), written


def _store_file(scanned, f: ScannedFile, store: ObjectStore, pool) -> tuple[Known, int]:
    """Copy one file into the store in one pass. Returns what was learnt, and bytes written."""
    if f.path == WEIGHTS:
        behind = Behind(TensorPass(f.abspath, scanned.header), pool)
        put = store.put(f.abspath, observer=behind)
        return Known(put.id, scanned.header.raw, behind.result), _written(put)
    if f.path == CONFIG:  # the bytes the scan parsed, so the blob is the config that was checked
        data = scanned.config_raw
        if len(data) != f.size:
            raise InvalidAdapter(scanned.root, f"{f.path} changed while it was being read")
        put = store.put_bytes(data)
        return Known(put.id, data), _written(put)
    put = store.put(f.abspath)
    if put.size != f.size:
        raise InvalidAdapter(scanned.root, f"{f.path} changed while it was being read")
    return Known(put.id), _written(put)


def _written(put) -> int:
    return put.size if put.written else 0


def _remember(cache: StatCache, seen_ns: int, f: ScannedFile, learnt: Known):
    """Into the stat cache, if the file still is as the scan found it (before SEEN_NS)."""
    try:
        now = FileStat.of(f.abspath.lstat())
    except OSError:
        return
    if now == f.stat:
        cache.add(f.abspath, f.stat, seen_ns, learnt)


class Behind:
    """A chunk observer that runs a `TensorPass` on a worker thread, a few chunks behind the
    store, which hashes and writes on its own: the two halves of one pass on two cores."""

    def __init__(
        self,
        tensor_pass: TensorPass | None,
        pool: ThreadPoolExecutor | None,
        depth: int = DEPTH,
        cancelled: threading.Event | None = None,
    ):
        self.tensor_pass, self.pool, self.depth = tensor_pass, pool, depth
        self.cancelled = cancelled  # set: the next chunk stops the copy
        self.pending: collections.deque[Future] = collections.deque()
        self.result: dict[str, str] = {}

    def update(self, chunk: bytes) -> None:
        if self.cancelled is not None and self.cancelled.is_set():
            raise _Cancelled
        if self.tensor_pass is None:
            return
        self.pending.append(self.pool.submit(self.tensor_pass.update, chunk))
        if len(self.pending) > self.depth:
            self.pending.popleft().result()  # raises what the tensor half refused

    def done(self, blob_id: BlobId, size: int) -> None:
        while self.pending:
            self.pending.popleft().result()
        if self.tensor_pass is not None:
            self.result = self.tensor_pass.finish(size)


# --- reading ahead ----------------------------------------------------------------------


class _Cancelled(Exception):
    """The read-ahead was told to stop (its commit ended without it)."""


_AHEAD: dict[str, ReadAhead] = {}  # folder -> the read-ahead of it this process started


def read_ahead(folder: str | os.PathLike, store: ObjectStore, cache_path: Path) -> None:
    """Start copying FOLDER into STORE (a LocalObjectStore) on a thread of its own, before the
    commit that will claim the copy (`ingest`) has loaded the database layer or checked
    anything: see `ReadAhead`. Anything it stages and no commit claims is dropped at exit."""
    if not _AHEAD:
        atexit.register(drop_read_aheads)
    key = os.path.abspath(folder)
    if key in _AHEAD:
        return
    ahead = _AHEAD[key] = ReadAhead(Path(folder), store, cache_path)
    ahead.thread.start()


def claim(scanned: ScannedAdapter, store: ObjectStore) -> ReadAhead | None:
    """The read-ahead of SCANNED's folder, once it is over, if it read these very files (the
    same stats, config and header) into this store without an error; None otherwise (and a
    read-ahead that does not fit is dropped: the commit reads the files itself)."""
    ahead = _AHEAD.pop(os.path.abspath(scanned.root), None)
    if ahead is None:
        return None
    ahead.thread.join()
    fits = ahead.scanned is not None and ahead.error is None
    fits = fits and getattr(store, "root", None) == ahead.store.root
    fits = fits and ahead.scanned.files == scanned.files
    fits = fits and ahead.scanned.config_raw == scanned.config_raw
    if not (fits and ahead.scanned.header.raw == scanned.header.raw):
        ahead.drop()
        return None
    return ahead


def drop_read_aheads() -> None:
    """Stop every read-ahead no commit claimed, and remove what it staged."""
    while _AHEAD:
        _, ahead = _AHEAD.popitem()
        ahead.cancelled.set()
        ahead.thread.join()
        ahead.drop()


class ReadAhead:
    """The copy of an adapter folder into a local store, on a thread of its own, started by
    `mint commit` before it imports the database layer (which takes longer than reading
    80 MB): the folder is scanned (every check that needs no database), and each file the
    stat cache does not know is copied, hashed (its tensors too, in the same pass) and synced
    into a temp file of the store (`LocalObjectStore.stage`). Nothing is published: the commit
    claims the staged blobs in `ingest`, after its own checks passed (the base's among them),
    and publishes them then. An error here is not reported: the commit reads the files itself,
    and meets it again."""

    def __init__(self, folder: Path, store, cache_path: Path):
        self.folder, self.store, self.cache_path = folder, store, cache_path
        self.scanned: ScannedAdapter | None = None
        self.staged: dict[str, tuple[Staged, Known]] = {}
        self.error: BaseException | None = None
        self.cancelled = threading.Event()
        self.thread = threading.Thread(target=self._run, name="mint-read-ahead", daemon=True)

    def _run(self) -> None:
        cache = StatCache(self.cache_path)  # its own connection, in this thread
        try:
            scanned = scan_adapter(self.folder, cache=cache)
            known = known_files(scanned, cache)
            self.scanned = scanned
            if from_cache(scanned, known) is not None:
                return  # nothing to copy
            with ThreadPoolExecutor(1, thread_name_prefix="mint-tensors") as pool:
                for f in sorted(scanned.files, key=lambda f: f.path != WEIGHTS):
                    if f.path not in known and f.path != CONFIG:  # the config: a few bytes
                        self.staged[f.path] = self._stage(scanned, f, pool)
        except BaseException as exc:  # noqa: BLE001 - the commit's own pass says it
            self.error = exc
        finally:
            cache.close()

    def _stage(self, scanned: ScannedAdapter, f: ScannedFile, pool) -> tuple[Staged, Known]:
        tensors = TensorPass(f.abspath, scanned.header) if f.path == WEIGHTS else None
        behind = Behind(tensors, pool, cancelled=self.cancelled)
        blob = self.store.stage(f.abspath, observer=behind)
        if blob.size != f.size:
            blob.discard()
            raise InvalidAdapter(scanned.root, f"{f.path} changed while it was being read")
        head = scanned.header.raw if tensors is not None else None
        return blob, Known(blob.id, head, behind.result if tensors is not None else None)

    def drop(self) -> None:
        """Remove what was staged and not published."""
        for blob, _ in self.staged.values():
            blob.discard()
        self.staged.clear()
