"""Reading an adapter folder ahead of its commit (issue 24).

`mint commit` starts copying the folder into the store before it imports the database layer
(`mint.commits.early`): the folder is scanned (every check that needs no database), and each
file the stat cache does not know is copied, hashed (its tensors too, in the same pass) and
synced into a temp file of the store (`LocalObjectStore.stage`). Nothing is published: the
commit claims the staged blobs in `ingest`, after its own checks passed (the base's among
them), and publishes them then. An error here is not reported: the commit reads the files
itself, and meets it again.

Where the process can fork and is still single-threaded (a new `mint commit` is, at that
point), the copy runs in a forked child process (`Forked`). A thread would share the
interpreter lock with the imports it is meant to overlap: each of its hundreds of steps
(a chunk read, hashed, written; numpy's own import) waits for the importing thread to hand
the lock over, and the copy ends long after the imports. The child has a lock of its own and
runs on the other core. It hands the parent its open, locked temp files (SCM_RIGHTS: the
locks go with them) and what it learnt, as JSON, then exits; the parent adopts them. A child
that dies leaves temp files named after it, which the parent removes. Elsewhere (or with
MINT_READ_AHEAD=thread) the same work runs on a thread (`Threaded`).
"""

from __future__ import annotations

import atexit
import base64
import collections
import importlib
import json
import os
import select
import socket
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from mint.commits.adapter import (
    CONFIG,
    WEIGHTS,
    HashedAdapter,
    ScannedAdapter,
    ScannedFile,
    scan_adapter,
)
from mint.commits.safetensors import TensorPass, check_finite
from mint.commits.statcache import FileStat, Known, StatCache
from mint.errors import InvalidAdapter
from mint.faults import crash_point
from mint.store import BlobId
from mint.store.local import LocalObjectStore, Staged

MAX_FDS = 64  # files a child may hand over (an adapter folder holds a few)
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


class _Cancelled(Exception):
    """The read-ahead was told to stop (its commit ended without it)."""


@dataclass
class Report:
    """What a read-ahead read: the files as scanned (path, size, stat), the config's and the
    header's bytes as parsed, when the files were looked at, and the staged blobs by path."""

    files: tuple[tuple[str, int, FileStat | None], ...]
    config_raw: bytes
    header_raw: bytes
    seen_ns: int
    staged: dict[str, tuple[Staged, Known]] = field(default_factory=dict)

    def fits(self, scanned: ScannedAdapter) -> bool:
        """Whether these are the very files SCANNED found (the same stats, config, header)."""
        files = tuple((f.path, f.size, f.stat) for f in scanned.files)
        return (
            files == self.files
            and self.config_raw == scanned.config_raw
            and self.header_raw == scanned.header.raw
        )

    def discard(self) -> None:
        """Remove what was staged and not published."""
        for blob, _ in self.staged.values():
            blob.discard()
        self.staged.clear()


def read_folder(
    folder: Path,
    store: LocalObjectStore,
    cache_path: Path,
    cancelled,
    prefix: str = "blob-",
    numpy: threading.Thread | None = None,
) -> Report:
    """Scan FOLDER and stage each file the stat cache does not know (the config excepted: a
    few bytes, which the commit stores from its own scan). CANCELLED (`is_set()`) stops the
    copy at its next chunk. Anything staged is removed if this fails. NUMPY: a thread
    importing numpy meanwhile; the weights' values are then checked once it is done, in the
    staged copy (the bytes that will be stored), rather than in the pass that copies them,
    which would wait for the import."""
    cache = StatCache(cache_path)  # a connection of its own, in this thread or process
    report = None
    try:
        scanned = scan_adapter(folder, cache=cache)
        report = Report(
            tuple((f.path, f.size, f.stat) for f in scanned.files),
            scanned.config_raw,
            scanned.header.raw,
            scanned.seen_ns,
        )
        known = known_files(scanned, cache)
        if from_cache(scanned, known) is not None:
            return report  # nothing to copy
        with ThreadPoolExecutor(1, thread_name_prefix="mint-tensors") as pool:
            for f in sorted(scanned.files, key=lambda f: f.path != WEIGHTS):
                if f.path not in known and f.path != CONFIG:
                    staged = _stage(scanned, f, store, pool, cancelled, prefix, numpy is None)
                    report.staged[f.path] = staged
        if numpy is not None and WEIGHTS in report.staged:
            numpy.join()
            check_finite(report.staged[WEIGHTS][0].temp.path, scanned.header)
        return report
    except BaseException:
        if report is not None:
            report.discard()
        raise
    finally:
        cache.close()


def _stage(scanned, f: ScannedFile, store, pool, cancelled, prefix, check: bool):
    """F staged into STORE, with what was learnt of it (its tensors' hashes: the weights);
    CHECK: the weights' values checked in the same pass."""
    weights = f.path == WEIGHTS
    tensors = TensorPass(f.abspath, scanned.header, check) if weights else None
    behind = Behind(tensors, pool, cancelled=cancelled)
    blob = store.stage(f.abspath, observer=behind, prefix=prefix)
    if blob.size != f.size:
        blob.discard()
        raise InvalidAdapter(scanned.root, f"{f.path} changed while it was being read")
    head = scanned.header.raw if tensors is not None else None
    return blob, Known(blob.id, head, behind.result if tensors is not None else None)


# --- the two ways to run it -------------------------------------------------------------


class Threaded:
    """A read-ahead on a thread of this process."""

    def __init__(self, folder: Path, store: LocalObjectStore, cache_path: Path):
        self.folder, self.store, self.cache_path = folder, store, cache_path
        self.report: Report | None = None
        self.cancelled = threading.Event()
        self.thread = threading.Thread(target=self._run, name="mint-read-ahead", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.report = read_folder(self.folder, self.store, self.cache_path, self.cancelled)
        except BaseException:  # noqa: BLE001 - the commit's own pass says it
            self.report = None

    def wait(self) -> Report | None:
        """What it read, once it is over; None if it failed."""
        self.thread.join()
        return self.report

    def cancel(self) -> None:
        """Stop it, and remove what it staged."""
        self.cancelled.set()
        report = self.wait()
        if report is not None:
            report.discard()


class Forked:
    """A read-ahead in a forked child process, which hands its staged temp files over."""

    def __init__(self, folder: Path, store: LocalObjectStore, cache_path: Path):
        self.store = store
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.pid = os.fork()
        if self.pid == 0:  # the child: it never returns from here
            self.sock.close()
            _child(theirs, folder, store, cache_path)
        theirs.close()
        self.prefix = _prefix(self.pid)

    def wait(self) -> Report | None:
        """What the child read, once it exited; None if it failed (what it left is removed)."""
        if self.sock is None:
            return None
        data, fds = _receive(self.sock)
        self.sock.close()
        self.sock = None
        os.waitpid(self.pid, 0)
        try:
            return _report(self.store, data, fds) if data else None
        except (ValueError, KeyError, TypeError, OSError):
            for fd in fds:
                os.close(fd)
            return None
        finally:
            self.store.remove_leftovers(self.prefix)  # those of a child that died

    def cancel(self) -> None:
        """Tell the child to stop (it looks between chunks), and remove what it staged."""
        if self.sock is not None:
            self.sock.shutdown(socket.SHUT_WR)
        report = self.wait()
        if report is not None:
            report.discard()


def _prefix(pid: int) -> str:
    return f"blob-ahead-{pid}-"


class _ParentGone:
    """`is_set()`: whether the parent wrote to, or closed, its end of SOCK (cancelled)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def is_set(self) -> bool:
        return bool(select.select([self.sock], [], [], 0)[0])


def _child(sock: socket.socket, folder: Path, store, cache_path: Path) -> None:
    """The forked child's whole life: read ahead, hand over, exit (never return: the
    parent's stack, its atexit handlers and its buffered output are not the child's)."""
    code = 1
    try:
        numpy = threading.Thread(target=importlib.import_module, args=("numpy",), daemon=True)
        numpy.start()  # beside the copy, which needs no numpy (GIL-free calls, mostly)
        prefix = _prefix(os.getpid())
        report = read_folder(folder, store, cache_path, _ParentGone(sock), prefix, numpy)
        crash_point("commit.read-ahead-staged")
        try:
            _send(sock, report)  # the temp files are the parent's now: not removed here
        except BaseException:
            report.discard()
            raise
        code = 0
    except BaseException:  # noqa: BLE001 - the commit's own pass says it
        pass
    finally:
        os._exit(code)


def _send(sock: socket.socket, report: Report) -> None:
    """REPORT as JSON, then one byte carrying the staged temp files' descriptors."""
    staged = [
        [path, str(blob.temp.path), blob.id, blob.size, _b64(known.head), known.tensors]
        for path, (blob, known) in report.staged.items()
    ]
    message = {
        "files": [[p, n, None if s is None else s.key.split()] for p, n, s in report.files],
        "config": _b64(report.config_raw),
        "header": _b64(report.header_raw),
        "seen_ns": report.seen_ns,
        "staged": staged,
    }
    sock.sendall(json.dumps(message).encode())
    fds = [blob.temp.fd for blob, _ in report.staged.values()]
    if fds:
        socket.send_fds(sock, [b"."], fds)
    else:
        sock.sendall(b".")
    sock.close()


def _receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    """Everything the child sent, to its end: (the JSON, the descriptors). Nothing, if it
    did not finish (its message ends with the byte that carries the descriptors)."""
    chunks, fds = [], []
    while True:
        data, got, flags, _ = socket.recv_fds(sock, 1 << 16, MAX_FDS)
        fds += got
        if flags & socket.MSG_CTRUNC:
            data = b""  # more descriptors than expected: refuse the lot
        if not data:
            break
        chunks.append(data)
    data = b"".join(chunks)
    if not data.endswith(b"."):
        for fd in fds:
            os.close(fd)
        return b"", []
    return data[:-1], fds


def _report(store: LocalObjectStore, data: bytes, fds: list[int]) -> Report:
    """The child's report, its temp files adopted by STORE (ValueError if anything is off)."""
    m = json.loads(data)
    if len(m["staged"]) != len(fds):
        raise ValueError("the child handed over another number of files than it staged")
    files = tuple(
        (str(p), int(n), None if s is None else FileStat(*map(int, s))) for p, n, s in m["files"]
    )
    report = Report(files, _unb64(m["config"]), _unb64(m["header"]), int(m["seen_ns"]))
    for fd, (path, temp, blob_id, size, head, tensors) in zip(fds, m["staged"], strict=True):
        blob = store.adopt(fd, temp, blob_id, int(size))
        report.staged[str(path)] = (blob, Known(blob.id, _unb64(head), tensors))
    return report


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text, validate=True)


# --- the read-aheads of this process ----------------------------------------------------


_AHEAD: dict[str, Threaded | Forked] = {}  # folder -> the read-ahead of it this process started


def read_ahead(folder: str | os.PathLike, store: LocalObjectStore, cache_path: Path) -> None:
    """Start copying FOLDER into STORE ahead of its commit (forked where this process can,
    else on a thread). Anything it stages and no commit claims is dropped at exit."""
    if not _AHEAD:
        atexit.register(drop_read_aheads)
    key = os.path.abspath(folder)
    if key in _AHEAD:
        return
    forks = hasattr(os, "fork") and threading.active_count() == 1
    if os.environ.get("MINT_READ_AHEAD") == "thread":
        forks = False
    kind = Forked if forks else Threaded
    _AHEAD[key] = kind(Path(folder), store, cache_path)


def claim(scanned: ScannedAdapter, store) -> Report | None:
    """What the read-ahead of SCANNED's folder read, once it is over, if it read these very
    files into this store; None otherwise (and a read-ahead that does not fit is dropped:
    the commit reads the files itself)."""
    ahead = _AHEAD.pop(os.path.abspath(scanned.root), None)
    if ahead is None:
        return None
    report = ahead.wait()
    if report is None:
        return None
    if getattr(store, "root", None) != ahead.store.root or not report.fits(scanned):
        report.discard()
        return None
    return report


def drop_read_aheads() -> None:
    """Stop every read-ahead no commit claimed, and remove what it staged."""
    while _AHEAD:
        _, ahead = _AHEAD.popitem()
        ahead.cancel()
