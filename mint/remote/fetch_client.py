"""fetch and clone: a registry's commits into a local repository, the git way (push, the
other way, is in `mint.remote.transfer_client`).

Fetch takes, for each line, the objects reachable from the registry's head that this
repository lacks: blobs first, put in the local store (durable before any metadata refers to
them), then the objects, then a local head that fast-forwards; a line that has diverged is left
alone. Tags travel and never move; channels never travel. A fetch keeps the registry's channels
and tags of each line it fetched as the remote's read-only remote-tracking refs,
`LINE@REMOTE/NAME` (`mint.refs.remote_refs`), pruning those the registry dropped.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

from mint import schema as s
from mint.commits.files import empty_folder
from mint.errors import (
    DestinationNotEmpty,
    InvalidObject,
    NotFastForward,
    RefExists,
    RevisionNotFound,
    WrongKind,
)
from mint.exchange.arriving import new_commit
from mint.exchange.heads import is_ancestor, line_head, move_head
from mint.exchange.receiving import import_objects
from mint.ids import RefKind
from mint.refs import RefsContainer, remote_refs
from mint.refs.revisions import check_name
from mint.refs.tags import tag_in
from mint.remote import reads
from mint.remote.blobs import Progress, fetch_into_store
from mint.remote.http import segment
from mint.remote.repo import RemoteRepo
from mint.remote.transfer_client import known
from mint.repo import Repo

MAX_HAVES = 100  # local heads named to the registry in one fetch request


@dataclass(frozen=True)
class LineFetch:
    line: str
    local: str | None  # this repository's head before the fetch
    remote: str  # the registry's head
    state: str  # new | fast-forward | up-to-date | ahead | diverged
    commits: int  # commits recorded here
    channels: dict[str, str]  # where the registry's channels of the line stand


@dataclass(frozen=True)
class FetchResult:
    remote: str
    lines: list[LineFetch]
    blobs: int  # blobs downloaded
    bytes: int
    tags: list[str] = field(default_factory=list)  # LINE@TAG created here
    conflicts: list[str] = field(default_factory=list)  # tags left alone, one line each
    tracking: str | None = None  # the remote whose channels and tags are kept (None: none)
    pruned: list[str] = field(default_factory=list)  # LINE@REMOTE/NAME the registry dropped


def fetch(
    repo: Repo,
    remote: RemoteRepo,
    lines: list[str] | None = None,
    *,
    by: str,
    progress: Progress | None = None,
    name: str | None = None,
) -> FetchResult:
    """Bring LINES (default: every line) of the registry here, with their tags and
    evaluations; a local head only fast-forwards (see the module's docstring). The registry's
    channels and tags of each line are kept as remote-tracking refs of remote NAME (default:
    the remote whose URL it is; none for a URL no remote has), pruned as git's fetch --prune."""
    known = {i.name for i in reads.ls(remote)}
    for line in lines or []:
        if line not in known:
            raise RevisionNotFound(line, "unknown line on the registry")
    channels = {st.name: st.channels for st in reads.status(remote)}
    tracking = name or _remote_named(repo, remote.url)
    out, created, conflicts, pruned, blobs, size = [], [], [], [], 0, 0
    for line in lines or sorted(known):
        data = remote.client.get(f"/lines/{segment(line)}/objects", have=_haves(repo, line))
        got, stored = _receive(repo, remote, data, progress)
        blobs, size = blobs + got.blobs, size + got.bytes
        out.append(_advance(repo, line, data["head"], stored, channels.get(line, {}), by))
        new, bad = _receive_tags(repo, data.get("tags", []), by)
        created, conflicts = created + new, conflicts + bad
        pruned += _track(repo, tracking, line, channels.get(line, {}), data.get("tags", []))
    if tracking and not lines:  # a whole fetch: the lines the registry no longer shows too
        with repo.db.write() as conn:
            pruned += remote_refs.prune_lines(conn, tracking, sorted(known))
    return FetchResult(remote.url, out, blobs, size, created, conflicts, tracking, pruned)


def _remote_named(repo: Repo, url: str) -> str | None:
    """The remote of this repository whose URL is URL, if exactly one is."""
    from mint.remote.config import remote_ls

    found = [r.name for r in remote_ls(repo.mint_dir) if r.url == url]
    return found[0] if len(found) == 1 else None


def _track(repo: Repo, remote: str | None, line: str, channels: dict, tags: list) -> list[str]:
    """Keep LINE's CHANNELS and TAGS on the registry as REMOTE's remote-tracking refs."""
    if remote is None:
        return []
    refs = {check_name("channel", n): (RefKind.CHANNEL, t) for n, t in channels.items()}
    refs |= {check_name("tag", t["name"]): (RefKind.TAG, t["target"]) for t in tags}
    with repo.db.write() as conn:
        return remote_refs.track(conn, remote, line, refs)


def _haves(repo: Repo, line: str) -> list[str]:
    """Heads here the registry may know, this line's first: it sends nothing behind them."""
    with repo.db.read() as conn:
        found = conn.execute(sa.select(s.lines.c.name, s.lines.c.head)).all()
    heads = sorted(found, key=lambda r: r.name != line)
    return [r.head for r in heads if r.head][:MAX_HAVES]


def _receive(repo: Repo, remote: RemoteRepo, data: dict, progress):
    """Blobs first (verified, durable), then the objects in one transaction. The commits are
    checked before a byte is downloaded: their sizes are what the downloads trust."""
    if not isinstance(data, dict):
        raise InvalidObject("the registry's objects are not a JSON object")
    commits = [new_commit(c) for c in data.get("commits", [])]
    sizes = {f.sha256: f.size for c in commits for f in c.files.values()}
    got = fetch_into_store(remote.client, repo.store, sizes, repo.mint_dir, progress)
    payload = {k: data.get(k, []) for k in ("bases", "commits", "evaluations", "signatures")}
    imported = import_objects(repo, payload, pushed_by=None)
    return got, len(imported.stored)


def _advance(repo: Repo, line: str, theirs: str, n: int, channels: dict, by: str) -> LineFetch:
    """Fast-forward LINE here to THEIRS, the registry's head; leave a diverged line alone."""
    local = line_head(repo, line)
    if local == theirs:
        return LineFetch(line, local, theirs, "up-to-date", n, channels)
    try:
        move_head(repo, line, local, theirs, force=False, by=by)
    except NotFastForward:
        with repo.db.read() as conn:
            ahead = is_ancestor(conn, theirs, local)
        return LineFetch(line, local, theirs, "ahead" if ahead else "diverged", n, channels)
    return LineFetch(line, local, theirs, "new" if local is None else "fast-forward", n, channels)


def _receive_tags(repo: Repo, tags: list[dict], by: str) -> tuple[list[str], list[str]]:
    """Create the registry's tags that are missing here; never move one that exists."""
    created, conflicts = [], []
    for t in tags:
        ref, target = f"{t['line']}@{t['name']}", t["target"]
        try:
            with repo.db.write() as conn:
                if not known(conn, target):
                    continue  # its commit is not reachable from the line's head
                existing = RefsContainer(conn).get(t["line"], t["name"])
                if existing is not None and existing.target == target:
                    continue
                tag_in(conn, ref, target, by=by, message=t.get("message"))
            created.append(ref)
        except (RefExists, WrongKind) as exc:
            conflicts.append(f"{exc} here; the registry's {ref} is at {target[:12]}: left alone")
    return created, conflicts


@dataclass(frozen=True)
class CloneResult:
    path: str
    url: str
    fetched: FetchResult


def clone(
    url: str,
    dest: str | Path,
    *,
    token: str | None,
    lines: list[str] | None = None,
    by: str,
    db_url: str | None = None,
    progress: Progress | None = None,
    transport=None,
    token_from: str | None = None,
) -> CloneResult:
    """A new repository at DEST (new or empty) with remote "origin" at URL, fetched (TOKEN
    came from TOKEN_FROM, for the words of a refusal)."""
    from mint.remote.config import ORIGIN, remote_add
    from mint.repo import init

    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise DestinationNotEmpty(str(dest))
    remote = RemoteRepo(url, token, transport=transport, token_from=token_from)
    try:
        remote.whoami()  # a wrong URL or token fails before anything is written
        created = not dest.exists()
        repo, _ = init(dest, db_url)
        try:
            remote_add(repo.mint_dir, "origin", url)
            result = fetch(repo, remote, lines, by=by, progress=progress, name=ORIGIN)
        except BaseException:
            repo.close()
            shutil.rmtree(dest, ignore_errors=True) if created else empty_folder(dest)
            raise
        repo.close()
    finally:
        remote.close()
    return CloneResult(str(dest), remote.url, result)
