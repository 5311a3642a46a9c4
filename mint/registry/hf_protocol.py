"""The Hugging Face Hub's download protocol over a registry's lines (`../shared/HF-PROTOCOL.md`):
what a revision names, the files a commit shows, and the typed errors the Hub client reads.

A line is a model repo whose id is the line's name; its revisions are `main` (the head, or the
holder of the channel the server names with `--hf-main`), its channels and tags, and its commits,
shown as the first 40 hex digits of their ids. A set commit shows its checkout.
"""

from __future__ import annotations

import collections
import hashlib
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from starlette.responses import JSONResponse

from mint import schema as s
from mint.commits import rows
from mint.commits.log import walk
from mint.errors import InvalidName, MintError
from mint.ids import RefKind
from mint.refs import check_name, find_line, resolve
from mint.repo import Repo
from mint.sets.layout import checkout_items

CHECKOUTS = 256  # commits whose files a process keeps (the least recently asked forgotten)
SHOWN = 40  # hex digits of a commit id shown to the client: it takes 40 as an immutable commit
_PLAIN_REV = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_PR_REV = re.compile(r"^refs/pr/([1-9][0-9]{0,8})$")
_HEADER_SAFE = re.compile(r"[^\x20-\x7e]")  # a header value holds printable ASCII only

_checkouts: collections.OrderedDict[tuple[int, str], tuple[str, dict]] = collections.OrderedDict()
_lock = threading.Lock()

# Called with a read transaction and the full ids an answer shows; raises when the reader
# may not see them (a token limited to lines, a set with members beyond them).
Check = Callable[..., None]


class HubMiss(Exception):
    """A typed Hub error: 404 with `X-Error-Code` (RepoNotFound, RevisionNotFound,
    EntryNotFound), and `X-Repo-Commit` when the commit is known; or 403 `GatedRepo`, a
    token that may not read the repo (the client raises it as such, with our message)."""

    def __init__(self, code: str, message: str, commit: str | None = None, status: int = 404):
        super().__init__(message)
        self.code, self.message, self.commit, self.status = code, message, commit, status


def header_text(text: str) -> str:
    """TEXT as a header can carry it: what is not printable ASCII (a path's `☃`, a control
    character) escaped the way Python writes it (`\\u2603`); the body keeps the text as is."""
    return _HEADER_SAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def is_line_name(name: str) -> bool:
    """Whether NAME could be a line's: anything else names no repo, and is not looked up."""
    try:
        check_name("line", name)
    except InvalidName:
        return False
    return True


def miss_response(exc: HubMiss) -> JSONResponse:
    headers = {"X-Error-Code": exc.code, "X-Error-Message": header_text(exc.message)}
    if exc.commit:
        headers["X-Repo-Commit"] = exc.commit
    return JSONResponse({"error": exc.message}, status_code=exc.status, headers=headers)


@dataclass(frozen=True)
class HubFile:
    path: str
    size: int
    sha256: str
    blob: str | None  # the store's blob id, or None when the bytes are generated
    data: bytes | None = None


@dataclass(frozen=True)
class Snapshot:
    line: str
    commit: str  # the full id
    modified: str  # ISO time of the commit
    files: dict[str, HubFile]

    @property
    def sha(self) -> str:
        return self.commit[:SHOWN]


def revision_of(conn, line: str, rev: str, hf_main: str | None) -> str:
    """The full commit id REV names on LINE (HubMiss when it names none)."""
    found = find_line(conn, line) if is_line_name(line) else None
    if found is None:
        raise HubMiss("RepoNotFound", f"no line {line!r}")
    if rev == "main" and found.head is None:  # made by create_repo, no commit yet
        raise HubMiss("EntryNotFound", f"{line} has no commit yet")
    if rev == "main" and hf_main is None:
        target = line
    elif rev == "main":
        target = f"{line}@{hf_main}"
    elif _PR_REV.match(rev):  # a proposal (mint.proposals)
        from mint.proposals import proposal_of_commit

        try:
            return proposal_of_commit(conn, line, int(_PR_REV.match(rev).group(1)))
        except MintError as exc:
            raise HubMiss("RevisionNotFound", f"{line} has no revision {rev!r}") from exc
    elif _PLAIN_REV.match(rev):
        target = f"{line}@{rev}"
    else:
        raise HubMiss("RevisionNotFound", f"{line} has no revision {rev!r}")
    try:
        return resolve(conn, target).id
    except MintError as exc:
        raise HubMiss("RevisionNotFound", f"{line} has no revision {rev!r}") from exc


def snapshot(
    repo: Repo, line: str, rev: str, hf_main: str | None, check: Check | None = None
) -> Snapshot:
    """The commit LINE@REV names and the files its checkout holds, once CHECK let the
    reader see that commit (in the same transaction: what is checked is what is shown)."""
    with repo.db.read() as conn:
        cid = revision_of(conn, line, rev, hf_main)
        if check is not None:
            check(conn, [cid])
        with _lock:
            known = _checkouts.get((id(repo), cid))
            if known is not None:
                _checkouts.move_to_end((id(repo), cid))
        if known is None:
            known = _checkout(repo, conn, cid)
    return Snapshot(line, cid, *known)


def commits_of(
    repo: Repo,
    line: str,
    rev: str,
    hf_main: str | None,
    check: Check | None = None,
    limit: int | None = None,
) -> list[dict]:
    """The Hub's commit list of LINE@REV (`list_repo_commits`): the commit and every one it
    descends from (the LIMIT newest), newest first, each with all its parents (a merge's
    inputs, from any line) as their first 40 digits; a reader limited to lines is shown the
    commits it may read."""
    with repo.db.read() as conn:
        cid = revision_of(conn, line, rev, hf_main)
        if check is not None:
            check(conn, [cid])
        walked = walk(conn, cid, limit)
        shown = [c for c in walked if check is None or _may(check, conn, c.id)]
    return [
        {
            "id": c.id[:SHOWN],
            **_title_and_body(c.message),
            "authors": [{"user": c.author}],
            "date": hub_time(c.created_at),
            "parents": [p[:SHOWN] for p in c.parents],
        }
        for c in shown
    ]


def _title_and_body(message: str) -> dict:
    """A commit message as the Hub splits it: its first line the title, the rest (after the
    blank line) the message, as `upload_folder(commit_message, commit_description)` writes."""
    title, _, body = message.partition("\n")
    return {"title": title, "message": body.strip("\n")}


def _may(check: Check, conn, cid: str) -> bool:
    try:
        check(conn, [cid])
    except HubMiss:
        return False
    return True


def _checkout(repo: Repo, conn, cid: str) -> tuple[str, dict[str, HubFile]]:
    """(time, files) of commit CID: what a commit shows never changes, so it is kept for the
    next request of the same commit (a download asks once per file, twice with its HEAD)."""
    created = rows.commit_row(conn, cid).created_at
    items = checkout_items(conn, cid)
    sizes = _sizes(conn, {item for _, item in items if isinstance(item, str)})
    files = {}
    for path, item in items:
        if isinstance(item, bytes):
            digest = hashlib.sha256(item).hexdigest()
            files[path] = HubFile(path, len(item), digest, None, item)
        else:
            size = sizes[item] if item in sizes else repo.store.size(item)
            files[path] = HubFile(path, size, item, item)
    known = (hub_time(created), dict(sorted(files.items())))
    with _lock:
        _checkouts[(id(repo), cid)] = known
        while len(_checkouts) > CHECKOUTS:
            _checkouts.popitem(last=False)
    return known


def _sizes(conn, blobs: set[str]) -> dict[str, int]:
    """Each blob's size as the commits that hold it recorded it (no request to the store)."""
    if not blobs:
        return {}
    q = sa.select(s.files.c.blob_id, s.files.c.size).where(s.files.c.blob_id.in_(sorted(blobs)))
    return {r.blob_id: r.size for r in conn.execute(q.distinct())}


def hub_time(value) -> str:
    """A stored time as the Hub writes one: UTC, milliseconds, a `Z`."""
    when = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    if when.tzinfo is not None:
        when = when.astimezone(UTC).replace(tzinfo=None)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def sibling(f: HubFile) -> dict:
    lfs = {"sha256": f.sha256, "size": f.size, "pointerSize": 134}
    return {"rfilename": f.path, "size": f.size, "blobId": f.sha256[:SHOWN], "lfs": lfs}


def model_info(snap: Snapshot) -> dict:
    return {
        "_id": snap.sha,
        "id": snap.line,
        "modelId": snap.line,
        "sha": snap.sha,
        "lastModified": snap.modified,
        "createdAt": snap.modified,
        "private": False,
        "disabled": False,
        "gated": False,
        "tags": [],
        "siblings": [sibling(f) for f in snap.files.values()],
    }


def tree_items(snap: Snapshot, folder: str, recursive: bool) -> list[dict]:
    """The entries under FOLDER ('' for the root): files, and folders as directories."""
    prefix = f"{folder.strip('/')}/" if folder.strip("/") else ""
    if prefix and not any(p.startswith(prefix) for p in snap.files):
        if prefix[:-1] in snap.files:
            return [_file_item(snap.files[prefix[:-1]])]
        raise HubMiss("EntryNotFound", f"{snap.line} has no {folder!r}", snap.sha)
    entries: dict[str, dict] = {}
    for path, f in snap.files.items():
        if not path.startswith(prefix):
            continue
        parts = path[len(prefix) :].split("/")
        for depth in range(1, len(parts)):
            if depth > 1 and not recursive:
                break
            d = prefix + "/".join(parts[:depth])
            oid = hashlib.sha1(f"{snap.commit}:{d}".encode()).hexdigest()
            entries.setdefault(d, {"type": "directory", "path": d, "oid": oid})
        if len(parts) == 1 or recursive:
            entries[path] = _file_item(f)
    return [entries[k] for k in sorted(entries)]


def _file_item(f: HubFile) -> dict:
    lfs = {"oid": f.sha256, "size": f.size, "pointerSize": 134}
    return {"type": "file", "path": f.path, "oid": f.sha256[:SHOWN], "size": f.size, "lfs": lfs}


def refs_of(
    repo: Repo, line: str, hf_main: str | None, check: Check | None = None, prs: bool = False
) -> dict:
    """Branches (`main` and the channels) and tags, each with its commit's 40 digits, once
    CHECK let the reader see every commit they name; with PRS, the proposals (refs/pr/N)."""
    with repo.db.read() as conn:
        if not is_line_name(line) or find_line(conn, line) is None:
            raise HubMiss("RepoNotFound", f"no line {line!r}")
        q = sa.select(s.refs.c.name, s.refs.c.kind, s.refs.c.target).where(s.refs.c.line == line)
        refs = conn.execute(q.order_by(s.refs.c.name)).all()
        try:
            main = revision_of(conn, line, "main", hf_main)
        except HubMiss:
            main = None
        p = s.proposals.c
        pulls = conn.execute(sa.select(p.number, p.commit_id).where(p.line == line)).all()
        pulls = sorted(pulls) if prs else []
        if check is not None:
            shown = [r.target for r in refs] + [r.commit_id for r in pulls]
            check(conn, shown + ([main] if main else []))

    def item(name: str, kind: str, target: str) -> dict:
        return {"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": target[:SHOWN]}

    branches = [item("main", "heads", main)] if main else []
    channels = [r for r in refs if r.kind == RefKind.CHANNEL and r.name != "main"]
    branches += [item(r.name, "heads", r.target) for r in channels]
    tags = [item(r.name, "tags", r.target) for r in refs if r.kind == RefKind.TAG]
    pr = [
        {"name": f"refs/pr/{n}", "ref": f"refs/pr/{n}", "targetCommit": c[:SHOWN]}
        for n, c in pulls
    ]
    return {"branches": branches, "converts": [], "tags": tags, "pullRequests": pr}
