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

import collections
from concurrent.futures import Future, ThreadPoolExecutor

from mint.commits.adapter import (
    CONFIG,
    WEIGHTS,
    HashedAdapter,
    ScannedAdapter,
    ScannedFile,
)
from mint.commits.safetensors import TensorPass
from mint.commits.statcache import FileStat, Known, StatCache
from mint.errors import InvalidAdapter
from mint.store import BlobId, ObjectStore

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
    Returns the hashes and the bytes written into the store."""
    blobs: dict[str, str] = {}
    tensors: dict[str, str] = dict((known.get(WEIGHTS) or Known("")).tensors or {})
    written = 0
    order = sorted(scanned.files, key=lambda f: f.path != WEIGHTS)
    with ThreadPoolExecutor(1, thread_name_prefix="mint-tensors") as pool:
        for f in order:
            if f.path in known:
                blobs[f.path] = known[f.path].blob
                written += _written(store.put(f.abspath, blob_id=blobs[f.path]))
                continue
            learnt, n = _store_file(scanned, f, store, pool)
            blobs[f.path], written = learnt.blob, written + n
            if f.path == WEIGHTS:
                tensors = learnt.tensors
            _remember(cache, scanned, f, learnt)
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


def _remember(cache: StatCache, scanned: ScannedAdapter, f: ScannedFile, learnt: Known):
    """Into the stat cache, if the file still is as the scan found it."""
    try:
        now = FileStat.of(f.abspath.lstat())
    except OSError:
        return
    if now == f.stat:
        cache.add(f.abspath, f.stat, scanned.seen_ns, learnt)


class Behind:
    """A chunk observer that runs a `TensorPass` on a worker thread, a few chunks behind the
    store, which hashes and writes on its own: the two halves of one pass on two cores."""

    def __init__(self, tensor_pass: TensorPass, pool: ThreadPoolExecutor, depth: int = DEPTH):
        self.tensor_pass, self.pool, self.depth = tensor_pass, pool, depth
        self.pending: collections.deque[Future] = collections.deque()
        self.result: dict[str, str] = {}

    def update(self, chunk: bytes) -> None:
        self.pending.append(self.pool.submit(self.tensor_pass.update, chunk))
        if len(self.pending) > self.depth:
            self.pending.popleft().result()  # raises what the tensor half refused

    def done(self, blob_id: BlobId, size: int) -> None:
        while self.pending:
            self.pending.popleft().result()
        self.result = self.tensor_pass.finish(size)
