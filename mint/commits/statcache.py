"""A stat cache, as git's index: what a file held when it was last read, keyed by what `lstat`
says about it, so that committing an unchanged folder again reads no file contents.

An entry is trusted only when every stat field (size, mtime_ns, ctime_ns, inode, device) is
the same as when the file was read, and the file's times were older than that moment by more
than one time stamp's granularity (racy git: a file written again within the same tick as the
stamp it already had keeps that stamp, and would look unchanged). The granularity is the file
system's, as its stamps show it (one that keeps whole seconds stamps multiples of a second; FAT
keeps even ones: two seconds), plus one tick of the kernel's coarse clock, which stamps files
and may lag the clock a commit reads. On a file system with nanosecond stamps that is about
10 ms: a file written by training a moment before `mint commit` runs is still cached by that
commit, so the next one reads nothing. Entries that would be racy are not kept: the next
commit reads the file again.

The cache is `.mint/statcache.db`, a SQLite file the local repository owns. It is a shortcut
and nothing more: an error reading or writing it counts as a miss, and a blob id it gives is
still checked against the file's bytes if the store has to copy them again. So it is written
without fsync (a commit waits for no disk flush of its own): each entry carries the sha256 of
its values, and one a crash left torn (a new blob id with an old page of tensor hashes) is a
miss.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import sqlite3
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

FILENAME = "statcache.db"
MIN_TICK_NS = 10_000_000  # the kernel's coarse clock ticks at HZ >= 100
WHOLE_SECOND_NS = 2_000_000_000  # a file system that keeps seconds may keep even ones (FAT)
_CLOCK_REALTIME_COARSE = 5  # Linux's clock id; the time module does not name it
MAX_ENTRIES = 2048
_VERSION = 3
_SCHEMA = """CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY,
    stat TEXT NOT NULL,
    blob TEXT NOT NULL,
    head BLOB,
    tensors BLOB,
    seen_ns INTEGER NOT NULL,
    digest TEXT NOT NULL
)"""


@dataclass(frozen=True)
class FileStat:
    """What `lstat` says about a file, as far as telling a change goes."""

    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    dev: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileStat:
        return cls(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)

    @property
    def key(self) -> str:
        # Text, not integers: inode and device numbers may not fit SQLite's signed 64 bits.
        return f"{self.size} {self.mtime_ns} {self.ctime_ns} {self.ino} {self.dev}"

    def racy(self, seen_ns: int) -> bool:
        """Whether the file changed too close to SEEN_NS (when it was read) to be trusted: a
        write after that moment could have left the same stamps."""
        return max(self.mtime_ns, self.ctime_ns) + self.racy_window_ns > seen_ns

    @property
    def racy_window_ns(self) -> int:
        """How much older than the reading the stamps must be: the file system's granularity
        and one tick of the clock that stamps files."""
        return granularity_ns(self.mtime_ns, self.ctime_ns) + tick_ns()


def granularity_ns(*stamps: int) -> int:
    """The coarsest granularity STAMPS allow: the largest power of ten, up to a second, that
    divides them all (ctime cannot be set by a tool, so it shows the file system's own); two
    seconds for whole ones. Nanosecond stamps that end in zeros by chance only widen the window."""
    granule = 1
    while granule < 1_000_000_000 and all(s % (granule * 10) == 0 for s in stamps):
        granule *= 10
    return WHOLE_SECOND_NS if granule == 1_000_000_000 else granule


@functools.cache
def tick_ns() -> int:
    """One tick of the kernel's coarse clock (files are stamped from it), at least MIN_TICK_NS."""
    if not sys.platform.startswith("linux"):
        return MIN_TICK_NS
    try:
        return max(MIN_TICK_NS, int(time.clock_getres(_CLOCK_REALTIME_COARSE) * 1e9))
    except OSError:
        return MIN_TICK_NS


@dataclass(frozen=True)
class Known:
    """What a file held when it was read: its blob id, the leading bytes a scan reads (all
    of a small file such as the config, the header of a safetensors file) and, for weights,
    the hash of each tensor."""

    blob: str
    head: bytes | None = None
    tensors: dict[str, str] | None = None


class StatCache:
    """The stat cache of one repository; `StatCache(None)` is one that never hits."""

    def __init__(self, path: str | os.PathLike | None):
        self.path = Path(path) if path is not None else None
        self._conn: sqlite3.Connection | None = None
        self._pending: dict[str, tuple] = {}
        self._seen: dict[tuple[str, FileStat], Known | None] = {}  # one lookup per file
        self.hits = 0

    @classmethod
    def in_folder(cls, mint_dir: str | os.PathLike | None) -> StatCache:
        return cls(Path(mint_dir) / FILENAME if mint_dir is not None else None)

    def get(self, abspath: str | os.PathLike, stat: FileStat | None) -> Known | None:
        """What the file at ABSPATH holds, if it is known and STAT says it is unchanged."""
        if stat is None:
            return None
        key = (_key(abspath), stat)
        if key not in self._seen:
            self._seen[key] = self._lookup(key[0], stat)
        return self._seen[key]

    def _lookup(self, path: str, stat: FileStat) -> Known | None:
        if self._connect() is None:
            return None
        try:
            row = self._conn.execute(
                "SELECT stat, blob, head, tensors, seen_ns, digest FROM files WHERE path = ?",
                (path,),
            ).fetchone()
        except sqlite3.Error:
            return None
        if row is None or row[0] != stat.key or stat.racy(row[4]) or _digest(row[:4]) != row[5]:
            return None
        self.hits += 1
        head = zlib.decompress(row[2]) if row[2] is not None else None
        return Known(row[1], head, json.loads(zlib.decompress(row[3])) if row[3] else None)

    def add(self, abspath: str | os.PathLike, stat: FileStat, seen_ns: int, known: Known):
        """Remember KNOWN for the file, as STAT described it at SEEN_NS, before it was read
        (the caller checks that the stat did not change while the file was read)."""
        if self.path is None or stat.racy(seen_ns):
            return
        # Compressed: a weights file's entry holds its header and a hash per tensor (about
        # 100 kB for 448 tensors, a fifth of that compressed).
        head = zlib.compress(known.head) if known.head is not None else None
        tensors = json.dumps(known.tensors, sort_keys=True).encode() if known.tensors else None
        values = (stat.key, known.blob, head, zlib.compress(tensors) if tensors else None)
        self._pending[_key(abspath)] = (*values, seen_ns, _digest(values))

    def close(self) -> None:
        """Write what was added (one transaction; on any error the cache stays as it was)."""
        try:
            if self._pending and self._connect() is not None:
                self._save()
        except sqlite3.Error:
            pass
        finally:
            self._pending.clear()
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _save(self) -> None:
        rows = [(path, *values) for path, values in self._pending.items()]
        with _transaction(self._conn):
            self._conn.executemany(
                "INSERT OR REPLACE INTO files (path, stat, blob, head, tensors, seen_ns, digest) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            count = self._conn.execute("SELECT count(*) FROM files").fetchone()[0]
            if count > MAX_ENTRIES:  # keep the files read most recently
                self._conn.execute(
                    "DELETE FROM files WHERE path NOT IN "
                    "(SELECT path FROM files ORDER BY seen_ns DESC LIMIT ?)",
                    (MAX_ENTRIES,),
                )

    def _connect(self) -> sqlite3.Connection | None:
        if self._conn is None and self.path is not None and self.path.parent.is_dir():
            try:
                self._conn = _open(self.path)
            except sqlite3.DatabaseError:  # not a database (any more): start it afresh
                self._conn = _reopen(self.path)
            except sqlite3.Error:
                self._conn = None
            if self._conn is None:
                self.path = None  # unusable: behave as a cache that never hits
        return self._conn


def _open(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=2.0, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = OFF")  # a cache: see the module's docstring
        if conn.execute("PRAGMA user_version").fetchone()[0] != _VERSION:
            with _transaction(conn):
                conn.execute("DROP TABLE IF EXISTS files")
                conn.execute(_SCHEMA)
                conn.execute(f"PRAGMA user_version = {_VERSION}")
    except sqlite3.Error:
        conn.close()
        raise
    return conn


def _reopen(path: Path) -> sqlite3.Connection | None:
    try:
        path.unlink(missing_ok=True)
        return _open(path)
    except (OSError, sqlite3.Error):
        return None


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection):
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _digest(values: tuple) -> str:
    """The sha256 of an entry's values (stat, blob, head, tensors), each with its length."""
    h = hashlib.sha256()
    for value in values:
        data = b"" if value is None else value if isinstance(value, bytes) else value.encode()
        h.update(b"-" if value is None else len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _key(abspath: str | os.PathLike) -> str:
    return os.fsdecode(os.path.abspath(abspath))
