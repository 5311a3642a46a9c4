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

from concurrent.futures import ThreadPoolExecutor

from mint.commits.adapter import CONFIG, WEIGHTS, HashedAdapter, ScannedAdapter, ScannedFile
from mint.commits.ahead import Behind, claim, from_cache, known_files
from mint.commits.safetensors import TensorPass
from mint.commits.statcache import FileStat, Known, StatCache
from mint.errors import InvalidAdapter
from mint.store import ObjectStore

__all__ = ["from_cache", "ingest", "known_files"]


def ingest(
    scanned: ScannedAdapter, store: ObjectStore, cache: StatCache, known: dict[str, Known]
) -> tuple[HashedAdapter, int]:
    """Store every file of SCANNED, reading and hashing those the cache does not know in the
    pass that copies them; the weights first, as they are the ones that may be refused.
    What a read-ahead of these same files already staged (`mint.commits.ahead`) is published
    instead.
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
                    n, seen_ns = _written(blob.publish()), ahead.seen_ns
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
