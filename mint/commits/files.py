"""Writing stored files out: every byte is verified against its blob id on the way."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from mint.commits.adapter import safe_relpath
from mint.store import ObjectStore, copy_out


def write_files(
    store: ObjectStore,
    items: list[tuple[str, str | bytes]],
    dest: Path,
    advance: Callable[[int], object] | None = None,
) -> tuple[int, int]:
    """Write each (relative path, blob id or literal bytes) under DEST, a new or empty folder,
    calling ADVANCE with the length of each chunk written (a progress bar).

    A blob whose bytes do not hash to its id stops the write (BlobCorrupt), and whatever was
    written is removed. Returns (files, bytes)."""
    return write_tree(
        items, dest, lambda blob, target: copy_out(store, blob, target, advance), advance
    )


def write_tree(
    items: list[tuple[str, str | bytes]],
    dest: Path,
    write_blob: Callable[[str, Path], object],
    advance: Callable[[int], object] | None = None,
) -> tuple[int, int]:
    """`write_files` with WRITE_BLOB(blob id, new file) doing the (verified) copy of a blob:
    from a local store, or downloaded from a registry. It reports its own bytes; ADVANCE is
    called here for the literal ones."""
    plan = [(safe_relpath(p), src) for p, src in items]
    created = not dest.exists()
    total = 0
    try:
        dest.mkdir(parents=True, exist_ok=True)
        for path, src in plan:
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(src, bytes):
                target.write_bytes(src)
                if advance:
                    advance(len(src))
            else:
                write_blob(src, target)
            total += target.stat().st_size
            os.chmod(target, 0o644)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True) if created else empty_folder(dest)
        raise
    return len(plan), total


def empty_folder(folder: Path) -> None:
    """Remove everything inside FOLDER, keeping the folder."""
    for child in folder.iterdir():
        shutil.rmtree(child) if child.is_dir() else child.unlink()
