"""A disk that fills up, for tests of what happens when there is no space left.

`SmallDisk(folder)` mounts a small tmpfs on FOLDER when this process may mount (root with
CAP_SYS_ADMIN, as on the test machines), so that `fill()` leaves no byte free there and
`free()` gives the space back: a real full disk, ENOSPC from the kernel, seen by SQLite and by
the object store as in production. Where mounting is not allowed, `mountable()` says so and
the tests use the alternative each names (a process's RLIMIT_FSIZE, or a folder made
read-only), saying so in the test.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import subprocess
from pathlib import Path

CHUNK = 1 << 16


def mountable() -> bool:
    """Whether this process may mount a tmpfs (it tries once, on a scratch folder)."""
    if os.geteuid() != 0:
        return False
    probe = Path(f"/tmp/mint-mount-probe-{os.getpid()}")
    probe.mkdir(exist_ok=True)
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)], capture_output=True
        )
        if done.returncode != 0:
            return False
        subprocess.run(["umount", str(probe)], check=True)
        return True
    finally:
        probe.rmdir()


class SmallDisk:
    """A tmpfs of SIZE (e.g. "16m") mounted on FOLDER until `close()`; `fill()` takes every
    free byte with a filler file, `free()` removes it."""

    def __init__(self, folder: Path, size: str = "16m"):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        cmd = ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(self.folder)]
        subprocess.run(cmd, check=True, capture_output=True)
        self.filler = self.folder / ".filler"

    def fill(self) -> int:
        """Write the filler until the disk refuses (ENOSPC); returns the bytes it took.
        Unbuffered: a buffered file would fail again on close with what it still holds."""
        taken = 0
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for size in (CHUNK, 4096, 512, 1):  # big blocks, then the last bytes
                block = b"\0" * size
                while True:
                    try:
                        taken += os.write(fd, block)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
            with contextlib.suppress(OSError):
                os.fsync(fd)
        finally:
            os.close(fd)
        return taken

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def close(self) -> None:
        self.free()
        subprocess.run(["umount", "-l", str(self.folder)], check=False, capture_output=True)


def limit_file_size(pid: int, size: int | None) -> None:
    """The alternative where no tmpfs can be mounted: files process PID writes may grow to
    SIZE bytes at most (RLIMIT_FSIZE; None: no limit again, up to the hard limit). Python
    ignores SIGXFSZ, so a write past it fails with EFBIG, which SQLite reports as an I/O
    error: a stand-in for a full disk, not the same errno."""
    _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard if size is None else size, hard))


def empty_wal(db_path: Path) -> None:
    """Checkpoint a SQLite database and truncate its write-ahead log to nothing, so that its
    next write needs new space (not the log's old pages)."""
    import sqlite3

    db = sqlite3.connect(db_path, timeout=60)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()


def read_only(folder: Path, on: bool) -> None:
    """The alternative for a process that may not mount (not root): FOLDER and its files
    made read-only (ON) or writable again; SQLite then refuses writes as it does on a full
    disk (an OperationalError), for a user that permissions bind."""
    for path in [folder, *folder.iterdir()]:
        path.chmod(
            (0o555 if path.is_dir() else 0o444) if on else (0o755 if path.is_dir() else 0o644)
        )
