"""Blobs to and from a registry: only what is missing goes up, and every byte that comes down
is hashed while it is written."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mint.commits.files import write_tree
from mint.progress import Progress
from mint.remote.http import Client

MISSING_BATCH = 10_000  # the most ids POST /blobs/missing takes at once
PACK_BYTES = 1 << 30  # blob bytes one pack request carries (a bigger blob goes alone)
PACK_BLOBS = 10_000  # blobs one pack carries (the registry's bound)


@dataclass(frozen=True)
class Sent:
    blobs: int
    bytes: int


def missing(client: Client, ids: list[str]) -> list[str]:
    """The blob ids among IDS that the registry lacks, asked in batches."""
    out: list[str] = []
    for i in range(0, len(ids), MISSING_BATCH):
        out += client.post("/blobs/missing", {"ids": ids[i : i + MISSING_BATCH]})["missing"]
    return out


def missing_and_heads(
    client: Client, ids: list[str], lines: list[str]
) -> tuple[list[str], dict[str, str | None]]:
    """The ids among IDS (at most MISSING_BATCH) that the registry lacks, and where the heads
    of LINES are there (None: no such line), in one request."""
    got = client.post("/blobs/missing", {"ids": ids, "lines": lines})
    return got["missing"], got["heads"]


def upload(
    client: Client,
    sources: dict[str, tuple[Path, int]],
    progress: Progress | None = None,
    *,
    absent: list[str] | None = None,
) -> Sent:
    """Send each blob of SOURCES (id -> (local file, size)) that the registry lacks: ABSENT
    when already asked (`missing`), else asked here. They go as packs, one request for up to
    PACK_BYTES of them, streamed from their files."""
    absent = missing(client, sorted(sources)) if absent is None else absent
    todo = [b for b in dict.fromkeys(absent) if b in sources]
    progress = progress or Progress()
    total = sum(sources[b][1] for b in todo)
    with progress.phase(total, len(todo)):
        for pack in _packs([(b, *sources[b]) for b in todo]):
            client.post_pack(pack, advance=progress.advance, done=progress.blob_done)
    return Sent(len(todo), total)


def _packs(blobs: list[tuple[str, Path, int]]) -> list[list[tuple[str, Path, int]]]:
    """BLOBS in packs of at most PACK_BYTES and PACK_BLOBS (a bigger blob alone), in order."""
    packs: list[list[tuple[str, Path, int]]] = []
    size = 0
    for blob in blobs:
        if not packs or size + blob[2] > PACK_BYTES or len(packs[-1]) >= PACK_BLOBS:
            packs.append([])
            size = 0
        packs[-1].append(blob)
        size += blob[2]
    return packs


def download_files(
    client: Client,
    items: list[tuple[str, str | bytes]],
    dest: Path,
    advance: Callable[[int], object] | None = None,
) -> tuple[int, int]:
    """Write each (relative path, blob id or literal bytes) under DEST, a new or empty folder,
    the way a local checkout does (`mint.commits.files.write_tree`), each blob downloaded and
    verified on arrival; a blob used twice comes down once. ADVANCE is called with the length
    of each chunk written. Returns (files, bytes)."""
    fetched: dict[str, Path] = {}

    def write_blob(blob_id: str, target: Path) -> None:
        if blob_id in fetched:
            shutil.copyfile(fetched[blob_id], target)
            if advance:
                advance(target.stat().st_size)
        else:
            client.download(blob_id, target, advance)
            fetched[blob_id] = target

    return write_tree(items, dest, write_blob, advance)


def fetch_into_store(
    client: Client, store, sizes: dict[str, int], tmp_dir: Path, progress: Progress | None = None
) -> Sent:
    """Download each blob of SIZES (id -> size) that STORE lacks, verified on arrival, and
    put it in STORE, where it is durable before any metadata refers to it."""
    todo = sorted(b for b in sizes if not store.has(b))
    progress = progress or Progress()
    total = 0
    with (
        progress.phase(sum(sizes[b] for b in todo), len(todo)),
        tempfile.TemporaryDirectory(prefix="fetch-", dir=tmp_dir) as tmp,
    ):
        for blob_id in todo:
            part = Path(tmp) / blob_id
            total += client.download(blob_id, part, progress.advance)
            store.put(part, blob_id=blob_id)
            part.unlink()
            progress.blob_done(blob_id)
    return Sent(len(todo), total)
