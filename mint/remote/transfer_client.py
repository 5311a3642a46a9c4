"""push, fetch and clone: commits between a local repository and a registry, the git way.

Push sends the blobs the registry lacks (asked in one batch, streamed, hashed on arrival by
the registry), then the commit objects (whose ids it recomputes) with their bases and
evaluations, then moves each line head by compare-and-swap from where the registry had it:
fast-forward only, unless forced. Fetch does the same the other way: blobs first, put in the
local store (durable before any metadata refers to them), then the objects, then a local head
that fast-forwards; a line that has diverged is left alone. Tags travel and never move;
channels never travel: fetch reports where they stand.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

from mint import schema as s
from mint import transfer
from mint.commits import rows
from mint.commits.files import empty_folder
from mint.errors import (
    DestinationNotEmpty,
    InvalidObject,
    NotFastForward,
    PushRejected,
    RefConflict,
    RefExists,
    RegistryUnreachable,
    RevisionNotFound,
    WrongKind,
)
from mint.ids import RefKind
from mint.refs import RefsContainer, resolve
from mint.refs.revisions import check_name
from mint.refs.tags import tag_in
from mint.remote import reads
from mint.remote.blobs import Progress, fetch_into_store, upload
from mint.remote.http import segment
from mint.remote.repo import RemoteRepo
from mint.repo import Repo

FETCH_FIRST = "fetch, then push again"
NOT_FF = "ours does not descend from it (not a fast-forward): " + FETCH_FIRST
MOVED = "it moved while we pushed: " + FETCH_FIRST
MAX_HAVES = 100  # local heads named to the registry in one fetch request
OBJECTS_BATCH = 8 * 1024 * 1024  # bytes of commit objects per request (the server takes 32 MiB)


@dataclass(frozen=True)
class LinePush:
    line: str
    old: str | None  # the registry's head before the push
    new: str  # what was pushed
    moved: bool  # False: the registry's head already was NEW, or past it


@dataclass(frozen=True)
class PushResult:
    remote: str
    lines: list[LinePush]
    commits: int  # commit objects the registry stored
    blobs: int  # blobs sent
    bytes: int  # blob bytes sent
    tags: list[str] = field(default_factory=list)  # LINE@TAG created on the registry
    refused: list[str] = field(default_factory=list)  # one line each: what the registry kept


@dataclass(frozen=True)
class _Plan:
    moves: list[tuple[str, str | None, str, bool]]  # (line, registry's head, ours, must move)
    payload: dict
    sources: dict[str, tuple[Path, int]]
    tags: list[tuple[str, str, str | None]]  # (LINE@TAG, target, message)


def push(
    repo: Repo,
    remote: RemoteRepo,
    specs: list[str],
    *,
    tags: bool = False,
    force: bool = False,
    progress: Progress | None = None,
) -> PushResult:
    """Push each LINE[@REV] of SPECS to the registry (see the module's docstring)."""
    plan = _plan(repo, specs, {i.name: i.head for i in reads.ls(remote)}, tags, force)
    try:
        sent = upload(remote.client, plan.sources, progress)
        stored = post_objects(remote, plan.payload)
    except RegistryUnreachable as exc:
        raise RegistryUnreachable(
            f"push stopped: {exc}; no line moved on the registry, and pushing again sends "
            "only what is still missing"
        ) from None
    lines, refused = [], []
    for line, old, new, must in plan.moves:
        try:
            lines.append(
                _move(remote, line, old, new, force=force)
                if must
                else LinePush(line, old, new, moved=False)
            )
        except PushRejected as exc:
            refused.append(str(exc))
    created, tag_refused = _push_tags(remote, plan.tags)
    return PushResult(
        remote.url, lines, len(stored), sent.blobs, sent.bytes, created, refused + tag_refused
    )


def post_objects(remote: RemoteRepo, payload: dict, limit: int | None = None) -> list[str]:
    """Send PAYLOAD's objects in requests of about LIMIT bytes each, in order: the commits
    a request refers to were stored by an earlier one. Returns the ids stored."""
    limit = limit or OBJECTS_BATCH
    batches, batch, size = [], [], 0
    for c in payload["commits"]:
        n = len(json.dumps(c))
        if batch and size + n > limit:
            batches.append(batch)
            batch, size = [], 0
        batch, size = batch + [c], size + n
    batches.append(batch)
    stored: list[str] = []
    for i, commits in enumerate(batches):
        last = i == len(batches) - 1
        body = {
            "bases": payload["bases"] if i == 0 else [],
            "commits": commits,
            "evaluations": payload["evaluations"] if last else [],
        }
        if any(body.values()):
            stored += remote.client.post("/objects", body)["stored"]
    return stored


def _plan(repo: Repo, specs: list[str], heads: dict, tags: bool, force: bool) -> _Plan:
    """What to send: every commit reachable from the specs that the registry lacks."""
    with repo.db.read() as conn:
        tips = [_tip(conn, spec) for spec in specs]
        have = [h for h in heads.values() if h and _known(conn, h)]
        moves = [(line, heads.get(line), cid) for line, cid, _ in tips]
        moves = [(*m, _needs_move(conn, *m, force=force)) for m in moves]
        ids = transfer.reachable(conn, [cid for _, cid, _ in tips], have)
        sending = ids + [cid for _, cid, _ in tips if cid not in ids]  # their evaluations too
        payload = transfer.export_objects(conn, sending)
        sizes = transfer.blob_sizes(conn, ids)
        tag_plan = _tags(conn, tips, tags)
    sources = {b: (repo.store.local_path(b), n) for b, n in sizes.items()}
    return _Plan(moves, payload, sources, tag_plan)


def _tip(conn, spec: str) -> tuple[str, str, str | None]:
    """(line, commit id, tag named or None) of LINE[@REV]."""
    line, _, rev = spec.partition("@")
    line = line.split("~", 1)[0]
    check_name("line", line)
    found = resolve(conn, spec)
    cid = found.id
    if rows.commit_row(conn, cid).line != line:
        raise WrongKind(f"{spec} is a commit of line {rows.commit_row(conn, cid).line}")
    return line, cid, found.ref if found.ref_kind == "tag" else None


def _known(conn, cid: str) -> bool:
    try:
        rows.commit_row(conn, cid)
    except RevisionNotFound:
        return False
    return True


def _needs_move(conn, line: str, old: str | None, new: str, *, force: bool) -> bool:
    """Whether the registry's head must move from OLD to NEW. What the registry would refuse
    after the upload is refused here, before a byte is sent."""
    if old is None or force:
        return old != new
    if old == new:
        return False
    if not _known(conn, old):
        raise PushRejected(
            line, new, old, "the registry has commits this repository lacks: " + FETCH_FIRST
        )
    if transfer.is_ancestor(conn, old, new):
        return True
    if transfer.is_ancestor(conn, new, old):
        return False  # the registry is already past it
    raise PushRejected(line, new, old, NOT_FF)


def _tags(conn, tips, every: bool) -> list[tuple[str, str, str | None]]:
    """The tags a push carries: those named in the specs, and with EVERY each tag of a pushed
    line whose commit the push makes the registry hold."""
    out = {}
    for line, cid, named in tips:
        q = sa.select(s.refs).where(s.refs.c.line == line, s.refs.c.kind == RefKind.TAG)
        for t in conn.execute(q.order_by(s.refs.c.name)):
            if t.name == named or (every and transfer.is_ancestor(conn, t.target, cid)):
                out[f"{t.line}@{t.name}"] = (t.target, t.message)
    return [(ref, target, message) for ref, (target, message) in out.items()]


def _move(remote: RemoteRepo, line: str, old: str | None, new: str, *, force: bool) -> LinePush:
    body = {"old": old, "new": new, "force": force}
    try:
        remote.client.post(f"/lines/{segment(line)}/head", body)
    except (RefConflict, NotFastForward) as exc:
        now = {i.name: i.head for i in reads.ls(remote)}.get(line)
        raise PushRejected(
            line, new, now, MOVED if isinstance(exc, RefConflict) else NOT_FF
        ) from None
    return LinePush(line, old, new, moved=True)


def _push_tags(remote: RemoteRepo, plan) -> tuple[list[str], list[str]]:
    """Create the planned tags the registry lacks; one it holds elsewhere is refused."""
    lines = sorted({ref.partition("@")[0] for ref, _, _ in plan})
    there = {
        f"{t.line}@{t.name}": t.target for line in lines for t in reads.tag_list(remote, line)
    }
    created, refused = [], []
    for ref, target, message in plan:
        if there.get(ref, target) != target:
            refused.append(
                f"tag {ref} is at {there[ref][:12]} on the registry, not "
                f"{target[:12]}: a tag there never moves"
            )
            continue
        if ref in there:
            continue
        try:
            remote.client.post("/tags", {"tag": ref, "rev": target, "message": message})
            created.append(ref)
        except (RefExists, RefConflict) as exc:  # made by another push meanwhile
            refused.append(f"{exc} on the registry, not {target[:12]}: a tag there never moves")
    return created, refused


# --- fetch and clone -----------------------------------------------------------------------


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


def fetch(
    repo: Repo,
    remote: RemoteRepo,
    lines: list[str] | None = None,
    *,
    by: str,
    progress: Progress | None = None,
) -> FetchResult:
    """Bring LINES (default: every line) of the registry here, with their tags and
    evaluations; a local head only fast-forwards (see the module's docstring)."""
    known = {i.name for i in reads.ls(remote)}
    for line in lines or []:
        if line not in known:
            raise RevisionNotFound(line, "unknown line on the registry")
    channels = {st.name: st.channels for st in reads.status(remote)}
    out, created, conflicts, blobs, size = [], [], [], 0, 0
    for line in lines or sorted(known):
        data = remote.client.get(f"/lines/{segment(line)}/objects", have=_haves(repo, line))
        got, stored = _receive(repo, remote, data, progress)
        blobs, size = blobs + got.blobs, size + got.bytes
        out.append(_advance(repo, line, data["head"], stored, channels.get(line, {}), by))
        new, bad = _receive_tags(repo, data.get("tags", []), by)
        created, conflicts = created + new, conflicts + bad
    return FetchResult(remote.url, out, blobs, size, created, conflicts)


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
    commits = [transfer.new_commit(c) for c in data.get("commits", [])]
    sizes = {f.sha256: f.size for c in commits for f in c.files.values()}
    got = fetch_into_store(remote.client, repo.store, sizes, repo.mint_dir, progress)
    payload = {k: data.get(k, []) for k in ("bases", "commits", "evaluations")}
    imported = transfer.import_objects(repo, payload, pushed_by=None)
    return got, len(imported.stored)


def _advance(repo: Repo, line: str, theirs: str, n: int, channels: dict, by: str) -> LineFetch:
    """Fast-forward LINE here to THEIRS, the registry's head; leave a diverged line alone."""
    local = transfer.line_head(repo, line)
    if local == theirs:
        return LineFetch(line, local, theirs, "up-to-date", n, channels)
    try:
        transfer.move_head(repo, line, local, theirs, force=False, by=by)
    except NotFastForward:
        with repo.db.read() as conn:
            ahead = transfer.is_ancestor(conn, theirs, local)
        return LineFetch(line, local, theirs, "ahead" if ahead else "diverged", n, channels)
    return LineFetch(line, local, theirs, "new" if local is None else "fast-forward", n, channels)


def _receive_tags(repo: Repo, tags: list[dict], by: str) -> tuple[list[str], list[str]]:
    """Create the registry's tags that are missing here; never move one that exists."""
    created, conflicts = [], []
    for t in tags:
        ref, target = f"{t['line']}@{t['name']}", t["target"]
        try:
            with repo.db.write() as conn:
                if not _known(conn, target):
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
) -> CloneResult:
    """A new repository at DEST (new or empty) with remote "origin" at URL, fetched."""
    from mint.remote.config import remote_add
    from mint.repo import init

    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise DestinationNotEmpty(str(dest))
    remote = RemoteRepo(url, token, transport=transport)
    try:
        remote.whoami()  # a wrong URL or token fails before anything is written
        created = not dest.exists()
        repo, _ = init(dest, db_url)
        try:
            remote_add(repo.mint_dir, "origin", url)
            result = fetch(repo, remote, lines, by=by, progress=progress)
        except BaseException:
            repo.close()
            shutil.rmtree(dest, ignore_errors=True) if created else empty_folder(dest)
            raise
        repo.close()
    finally:
        remote.close()
    return CloneResult(str(dest), remote.url, result)
