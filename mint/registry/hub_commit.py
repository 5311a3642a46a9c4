"""The Hub's `create_commit` as a door onto `mint commit`: its NDJSON body read and checked,
the line's next tree planned from its head and the operations, laid out as a folder, and
committed by the porcelain's own `commit` (the same constructor and checks as `mint commit` of
a folder: the PEFT config, the registered base, the tensors, the names).

The body (huggingface_hub's `_prepare_commit_payload`) is one JSON object a line: first
`{"key": "header", "value": {"summary", "description", "parentCommit"?}}`, then operations:
`file` (a small file, base64), `lfsFile` (a blob uploaded by the LFS batch API, by its sha256
and size), `deletedFile` and `deletedFolder`. Every path is checked as a folder's are; every
`lfsFile` must name a blob the store holds, at its size, and (for a token limited to lines)
one the token may name (`mint.exchange.possession`). Nothing is stored before everything is
checked: the folder lies in the repository's temporary folder and goes once the commit is made
or refused.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from mint import api
from mint.commits import rows
from mint.commits.adapter import CONFIG, MAX_FILES, WEIGHTS, safe_relpath
from mint.commits.statcache import FileStat, Known, StatCache
from mint.errors import (
    Forbidden,
    InvalidObject,
    MintError,
    MissingObjects,
    RefConflict,
    WrongKind,
)
from mint.exchange import possession, received
from mint.ids import Kind
from mint.objects import CommitResult
from mint.refs import RefsContainer
from mint.registry.hf_protocol import SHOWN, HubMiss
from mint.registry.hub_learn import learnt
from mint.registry.upload import upload_folder
from mint.repo import Repo
from mint.store import copy_out
from mint.team.tokens import Identity

MAX_INLINE = 1 << 20  # bytes of a file the preupload answer sends inline ("regular")
_KEYS = {"file", "lfsFile", "deletedFile", "deletedFolder"}


@dataclass(frozen=True)
class Upload:
    """A create_commit's body, checked: what the commit says and what it changes."""

    summary: str
    description: str
    parent: str | None  # parentCommit as sent (hex, 7 to 64 digits), or None
    inline: dict[str, bytes] = field(default_factory=dict)  # path -> bytes
    lfs: dict[str, tuple[str, int | None]] = field(default_factory=dict)  # path -> (oid, size)
    deleted: list[str] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)

    @property
    def message(self) -> str:
        return f"{self.summary}\n\n{self.description}" if self.description else self.summary


def parse_body(body: bytes) -> Upload:
    """A create_commit body, every line checked (InvalidObject on the first bad one)."""
    lines = [line for line in body.split(b"\n") if line.strip()]
    if not lines:
        raise InvalidObject("an empty commit body: send a header line, then the operations")
    header = _header(_item(lines[0], 1))
    ops: dict[str, list] = {k: [] for k in _KEYS}
    if len(lines) - 1 > MAX_FILES:
        raise InvalidObject(
            f"a commit of {len(lines) - 1} operations: an adapter holds at most {MAX_FILES} files"
        )
    for n, raw in enumerate(lines[1:], 2):
        item = _item(raw, n)
        if item["key"] not in _KEYS:
            raise InvalidObject(
                f"line {n} of the commit: unknown key {received.shown(item['key'])}"
            )
        ops[item["key"]].append((n, item["value"]))
    upload = Upload(*header)
    for n, v in ops["file"]:
        upload.inline[_path(v, n)] = _content(v, n)
    for n, v in ops["lfsFile"]:
        upload.lfs[_path(v, n)] = _lfs(v, n)
    upload.deleted.extend(_path(v, n) for n, v in ops["deletedFile"])
    upload.folders.extend(_path(v, n, folder=True) for n, v in ops["deletedFolder"])
    return upload


def _item(raw: bytes, n: int) -> dict:
    try:
        item = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise InvalidObject(
            f"line {n} of the commit is not JSON (NDJSON: one object a line)"
        ) from None
    if (
        not isinstance(item, dict)
        or set(item) != {"key", "value"}
        or not isinstance(item["value"], dict)
    ):
        raise InvalidObject(f"line {n} of the commit is {received.shown(item)}: {{key, value}}")
    return item


def _header(item: dict) -> tuple[str, str, str | None]:
    if item["key"] != "header":
        raise InvalidObject("the commit's first line is its header: {key: header, value: ...}")
    v = item["value"]
    summary = v.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        raise InvalidObject("the commit's header has no summary (the commit message)")
    description = v.get("description") or ""
    parent = v.get("parentCommit")
    if not isinstance(description, str) or "\x00" in summary + description:
        raise InvalidObject("the commit's description is not text")
    if parent is not None and not (
        isinstance(parent, str) and 7 <= len(parent) <= 64 and _hex(parent)
    ):
        raise InvalidObject(f"parentCommit is {received.shown(parent)}: a commit's hex digits")
    return summary.strip(), description.strip(), parent


def _hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def _path(v: dict, n: int, folder: bool = False) -> str:
    path = v.get("path")
    if not isinstance(path, str):
        raise InvalidObject(f"line {n} of the commit names no path")
    return safe_relpath(path.rstrip("/") if folder else path)


def _content(v: dict, n: int) -> bytes:
    if v.get("encoding") != "base64" or not isinstance(v.get("content"), str):
        raise InvalidObject(f"line {n} of the commit: a file's content is base64 text")
    try:
        return base64.b64decode(v["content"], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidObject(f"line {n} of the commit: its content is not base64") from None


def _lfs(v: dict, n: int) -> tuple[str, int | None]:
    if v.get("algo", "sha256") != "sha256":
        raise InvalidObject(f"line {n} of the commit: an LFS file's algo is sha256")
    oid = received.hex64(v.get("oid"), f"line {n}'s LFS oid")
    size = v.get("size")
    if size is not None:
        size = received.whole(size, f"line {n}'s LFS size")
    return oid, size


# --- the next tree, as a folder ------------------------------------------------------------


def plan(repo: Repo, who: Identity, line: str, up: Upload) -> tuple[str | None, dict]:
    """(the line's head, path -> blob id or bytes): the head's files with UP applied, each
    LFS blob checked stored at its size and nameable by WHO. The parent UP names, if any,
    must be the head (RefConflict: a compare-and-swap the commit then makes)."""
    with repo.db.read() as conn:
        head = RefsContainer(conn).head(line)
        if head is not None and rows.commit_row(conn, head).kind != Kind.ADAPTER:
            raise WrongKind(f"line {line} holds sets: the Hub's uploads make adapter commits")
        if up.parent is not None and (head is None or not head.startswith(up.parent)):
            raise RefConflict(f"line {line}", up.parent, head)
        files: dict = {p: f.sha256 for p, f in (rows.files_of(conn, head) if head else {}).items()}
        blobs = sorted({oid for oid, _ in up.lfs.values()})
        if who.lines is not None and blobs:
            refused = possession.unproven(conn, blobs, token=who.name, may_read=who.may_touch)
            if refused:
                raise Forbidden(who.name, f"name blob {refused[0][:12]}: upload its bytes first")
    _apply_deletes(files, up, line)
    for path, (oid, size) in up.lfs.items():
        if not repo.store.has(oid):
            raise MissingObjects("blobs (upload them with the LFS batch API first)", [oid])
        if size is not None and repo.store.size(oid) != size:
            raise InvalidObject(f"{path} is {size} bytes in the commit, not its blob's size")
        files[path] = oid
    files.update(up.inline)
    return head, files


def _apply_deletes(files: dict, up: Upload, line: str) -> None:
    for path in up.deleted:
        if files.pop(path, None) is None:
            raise HubMiss("EntryNotFound", f"{line} has no file {path!r} to delete")
    for folder in up.folders:
        gone = [p for p in files if p.startswith(folder + "/")]
        if not gone:
            raise HubMiss("EntryNotFound", f"{line} has no folder {folder!r} to delete")
        for p in gone:
            del files[p]


@contextlib.contextmanager
def laid_out(repo: Repo, files: dict):
    """FILES (path -> blob id or bytes) as a folder in the repository's temporary folder,
    removed afterwards: a blob is linked from the store where it can be (read-only, its own
    bytes), else copied out and verified."""
    folder = Path(tempfile.mkdtemp(prefix="hub-commit-", dir=upload_folder(repo)))
    try:
        for path, src in files.items():
            target = folder / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(src, bytes):
                target.write_bytes(src)
            else:
                _link_or_copy(repo, src, target)
        _seed_stat_cache(repo, folder, files)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _seed_stat_cache(repo: Repo, folder: Path, files: dict) -> None:
    """Tell mint's stat cache what the folder's files hold, as far as the door knows it: the
    bytes it wrote, each blob it laid out (by id), and for weights what their upload's pass
    learnt (`hub_learn`: header and tensor hashes, values checked). The commit then reads
    those files no more than `mint commit` reads files its stat cache knows; a file not
    known (weights uploaded another way) is read and checked whole."""
    blobs = [b for b in files.values() if isinstance(b, str)]
    with repo.db.read() as conn:
        found = learnt(conn, blobs)
    known = {}
    for path, src in files.items():
        if isinstance(src, bytes):
            known[path] = Known(hashlib.sha256(src).hexdigest(), src if path == CONFIG else None)
        elif path != WEIGHTS or src in found:
            known[path] = found.get(src, Known(src))
    stats = {p: FileStat.of((folder / p).lstat()) for p in known}
    newest = max(
        (max(st.mtime_ns, st.ctime_ns) + st.racy_window_ns for st in stats.values()), default=0
    )
    while time.time_ns() <= newest:  # the cache trusts only files older than its reading
        time.sleep(0.005)
    seen_ns = time.time_ns()
    cache = StatCache.in_folder(repo.mint_dir)
    try:
        for path, k in known.items():
            cache.add(folder / path, stats[path], seen_ns, k)
    finally:
        cache.close()


def _link_or_copy(repo: Repo, blob: str, target: Path) -> None:
    try:
        os.link(repo.store.local_path(blob), target)
    except (OSError, NotImplementedError, MintError):
        copy_out(repo.store, blob, target)


# --- the door -------------------------------------------------------------------------------


def commit_upload(
    repo: Repo, who: Identity, line: str, up: Upload, *, propose: bool
) -> CommitResult:
    """Commit UP on LINE as `mint commit` commits a folder (or, PROPOSE, offer it to LINE)."""
    head, files = plan(repo, who, line, up)
    with laid_out(repo, files) as folder:
        return api.commit(
            repo,
            line,
            folder,
            up.summary if propose else up.message,
            author=who.name,
            provenance={"source": "hub-upload"},
            expect_head=head,
            propose=up.description if propose else None,
        )


def shown_id(cid: str) -> str:
    """A commit id as the Hub client takes it (SHOWN hex digits)."""
    return cid[:SHOWN]
