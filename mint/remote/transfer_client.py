"""push, fetch and clone: commits between a local repository and a registry, the git way.

Push takes three requests: which blobs the registry lacks and where its heads of the pushed
lines are (one answer); those blobs, streamed as one pack (hashed on arrival by the
registry); and the commit objects (whose ids it recomputes) with their bases and evaluations,
together with each line head's move by compare-and-swap from where the registry had it
(fast-forward only, unless forced) and the tags, in the registry's one transaction. Fetch does
the same the other way: blobs first, put in the local store (durable before any metadata
refers to them), then the objects, then a local head that fast-forwards; a line that has
diverged is left alone. Tags travel and never move; channels never travel. A fetch keeps the
registry's channels and tags of each line it fetched as the remote's read-only remote-tracking
refs, `LINE@REMOTE/NAME` (`mint.refs.remote_refs`), pruning those the registry dropped.
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
    RefExists,
    RegistryUnreachable,
    RevisionNotFound,
    WrongKind,
)
from mint.ids import RefKind
from mint.refs import RefsContainer, remote_refs, resolve
from mint.refs.revisions import check_name
from mint.refs.tags import tag_in
from mint.remote import reads
from mint.remote.blobs import (
    MISSING_BATCH,
    Progress,
    fetch_into_store,
    missing,
    missing_and_heads,
    upload,
)
from mint.remote.http import segment
from mint.remote.repo import RemoteRepo
from mint.repo import Repo

FETCH_FIRST = "fetch, then push again"
NOT_FF = "ours does not descend from it (not a fast-forward): " + FETCH_FIRST
MOVED = "it moved while we pushed: " + FETCH_FIRST
MAX_HAVES = 100  # local heads named to the registry in one fetch request
RECENT = 100  # commits whose blobs a push asks about before it knows the registry's heads
OBJECTS_BATCH = 8 * 1024 * 1024  # bytes of commit objects per request (the server takes 32 MiB)


@dataclass(frozen=True)
class LinePush:
    line: str
    old: str | None  # the registry's head before the push
    new: str  # what was pushed
    moved: bool  # False: the registry's head already was NEW, or past it
    member: bool = False  # a line a pushed set pins a member of, not one named in the push


@dataclass(frozen=True)
class PushResult:
    remote: str
    lines: list[LinePush]
    commits: int  # commit objects the registry stored
    blobs: int  # blobs sent
    bytes: int  # blob bytes sent
    tags: list[str] = field(default_factory=list)  # LINE@TAG created on the registry
    refused: list[str] = field(default_factory=list)  # one line each: what the registry kept
    notes: list[str] = field(default_factory=list)  # member lines left alone, one line each


@dataclass(frozen=True)
class _Plan:
    moves: list[tuple[str, str | None, str, bool]]  # (line, registry's head, ours, must move)
    payload: dict
    sources: dict[str, tuple[Path, int]]
    tags: list[tuple[str, str, str | None]]  # (LINE@TAG, target, message)
    members: list[tuple[str, str | None, str, bool]]  # the same, for the sets' member lines
    notes: list[str]  # member lines that will be left alone, and why


@dataclass(frozen=True)
class _Tips:
    tips: list[tuple[str, str, str | None]]  # (line, commit id, tag named or None)
    blobs: list[str]  # the blobs of their recent history: asked for with the registry's heads
    members: list[tuple[str, str]]  # (line, commit) pinned by a pushed set, lines not named

    @property
    def lines(self) -> list[str]:
        return list(dict.fromkeys([t[0] for t in self.tips] + [m[0] for m in self.members]))


def push(
    repo: Repo,
    remote: RemoteRepo,
    specs: list[str],
    *,
    tags: bool = False,
    force: bool = False,
    progress: Progress | None = None,
) -> PushResult:
    """Push each LINE[@REV] of SPECS to the registry (see the module's docstring). A pushed
    set's member lines come along: made, or fast-forwarded to the members it pins, never
    rewound; with TAGS, their tags of the members' history too."""
    found = _tips(repo, specs)
    try:
        absent, heads = missing_and_heads(remote.client, found.blobs, found.lines)
        plan = _plan(repo, found, heads, tags, force)
        unasked = sorted(set(plan.sources) - set(found.blobs))
        if unasked:  # the registry is further behind than the recent history: ask for these
            absent += missing(remote.client, unasked)
        sent = upload(remote.client, plan.sources, progress, absent=absent)
    except RegistryUnreachable as exc:
        raise RegistryUnreachable(
            f"push stopped: {exc}; no line moved on the registry, and pushing again sends "
            "only what is still missing"
        ) from None
    moves = [
        transfer.HeadMove(line, old, new, force) for line, old, new, must in plan.moves if must
    ]
    moves += [transfer.HeadMove(line, old, new) for line, old, new, must in plan.members if must]
    try:
        done = post_objects(remote, plan.payload, heads=moves, tags=plan.tags)
    except RegistryUnreachable as exc:
        raise RegistryUnreachable(
            f"push stopped: {exc}; the lines may or may not have moved on the registry: "
            "pushing again sends only what is still missing"
        ) from None
    return _result(remote.url, plan, done, sent)


def _result(url: str, plan: _Plan, done: dict, sent) -> PushResult:
    """What the push did, from the registry's answer DONE to PLAN's objects and moves."""
    pushed, refused = _head_results(plan.moves, done["heads"])
    members, notes = _member_results(plan.members, done["heads"])
    created, tag_refused = _tag_results(done["tags"])
    return PushResult(
        url,
        pushed + members,
        len(done["stored"]),
        sent.blobs,
        sent.bytes,
        created,
        refused + tag_refused,
        plan.notes + notes,
    )


def _head_results(moves, answered: list[dict]) -> tuple[list[LinePush], list[str]]:
    """The lines pushed (moved or already there) and the refusals, from the registry's answer
    to each head move the push asked for."""
    moved = {h["line"]: h for h in answered}
    pushed, refused = [], []
    for line, old, new, must in moves:
        if not must:
            pushed.append(LinePush(line, old, new, moved=False))
        elif moved[line]["result"] == "moved":
            pushed.append(LinePush(line, old, new, moved=True))
        else:
            why = MOVED if moved[line]["result"] == "conflict" else NOT_FF
            refused.append(str(PushRejected(line, new, moved[line]["head"], why)))
    return pushed, refused


def _member_results(members, answered: list[dict]) -> tuple[list[LinePush], list[str]]:
    """The member lines pushed with their sets, and one note for each that moved meanwhile."""
    moved = {h["line"]: h for h in answered}
    pushed, notes = [], []
    for line, old, new, must in members:
        done = must and moved[line]["result"] == "moved"
        pushed.append(LinePush(line, old, new, moved=done, member=True))
        if must and not done:
            now = (moved[line]["head"] or "nothing")[:12]
            notes.append(f"member line {line} left at {now} on the registry: it moved meanwhile")
    return pushed, notes


def post_objects(
    remote: RemoteRepo,
    payload: dict,
    limit: int | None = None,
    *,
    heads: list[transfer.HeadMove] | None = None,
    tags: list[tuple[str, str, str | None]] | None = None,
) -> dict:
    """Send PAYLOAD's objects in requests of about LIMIT bytes each, in order: the commits
    a request refers to were stored by an earlier one. The last request carries the HEADS
    moves and the TAGS ((LINE@TAG, target, message)), which the registry makes in the
    transaction that stores its objects. Returns the last answer, with the ids every request
    stored."""
    limit = limit or OBJECTS_BATCH
    batches, batch, size = [], [], 0
    for c in payload["commits"]:
        n = len(json.dumps(c))
        if batch and size + n > limit:
            batches.append(batch)
            batch, size = [], 0
        batch, size = batch + [c], size + n
    batches.append(batch)
    moves = [{"line": m.line, "old": m.old, "new": m.new, "force": m.force} for m in heads or []]
    made = [{"tag": ref, "rev": target, "message": message} for ref, target, message in tags or []]
    stored: list[str] = []
    answer: dict = {"stored": [], "present": [], "heads": [], "tags": []}
    for i, commits in enumerate(batches):
        last = i == len(batches) - 1
        body = {
            "bases": payload["bases"] if i == 0 else [],
            "commits": commits,
            "evaluations": payload["evaluations"] if last else [],
            "signatures": payload.get("signatures", []) if last else [],
            "heads": moves if last else [],
            "tags": made if last else [],
        }
        if any(body.values()):
            answer = remote.client.post("/objects", body)
            stored += answer["stored"]
    return {**answer, "stored": stored}


def _tips(repo: Repo, specs: list[str]) -> _Tips:
    """The commits SPECS name, and the blobs of their RECENT nearest commits (at most
    MISSING_BATCH blobs): the registry is rarely further behind, and when it is, the rest is
    asked for once its heads are known."""
    with repo.db.read() as conn:
        tips = [_tip(conn, spec) for spec in specs]
        history = transfer.recent(conn, [cid for _, cid, _ in tips], RECENT)
        blobs = sorted(transfer.blob_sizes(conn, history))[:MISSING_BATCH]
        members = _pinned(conn, tips)
    return _Tips(tips, blobs, members)


def _pinned(conn, tips) -> list[tuple[str, str]]:
    """(line, commit) of each member the sets of TIPS pin, on a line the push does not name;
    of two members of one line, the one that descends from the other."""
    named = {line for line, _, _ in tips}
    found: dict[str, str] = {}
    for _, cid, _ in tips:
        for m in rows.members_of(conn, cid):
            line = rows.commit_row(conn, m.commit_id).line
            other = found.get(line)
            if line not in named and (
                other is None or transfer.is_ancestor(conn, other, m.commit_id)
            ):
                found[line] = m.commit_id
    return sorted(found.items())


def _plan(repo: Repo, found: _Tips, heads: dict, tags: bool, force: bool) -> _Plan:
    """What to send: every commit reachable from the tips that the registry lacks."""
    tips = found.tips
    with repo.db.read() as conn:
        have = [h for h in heads.values() if h and _known(conn, h)]
        moves = [(line, heads.get(line), cid) for line, cid, _ in tips]
        moves = [(*m, _needs_move(conn, *m, force=force)) for m in moves]
        members = [(line, heads.get(line), cid) for line, cid in found.members]
        notes = [n for m in members if (n := _member_left(conn, *m))]
        members = [(*m, _member_moves(conn, *m)) for m in members]
        ids = transfer.reachable(conn, [cid for _, cid, _ in tips], have)
        sending = ids + [cid for _, cid, _ in tips if cid not in ids]  # their evaluations too
        payload = transfer.export_objects(conn, sending)
        sizes = transfer.blob_sizes(conn, ids)
        tag_plan = _tags(conn, tips + [(line, cid, None) for line, cid in found.members], tags)
    sources = {b: (repo.store.local_path(b), n) for b, n in sizes.items()}
    return _Plan(moves, payload, sources, tag_plan, members, notes)


def _tip(conn, spec: str) -> tuple[str, str, str | None]:
    """(line, commit id, tag named or None) of LINE[@REV]."""
    line, _, rev = spec.partition("@")
    line = line.split("~", 1)[0]
    check_name("line", line)
    found = resolve(conn, spec)
    cid = found.id
    if rows.commit_row(conn, cid).line != line:
        raise WrongKind(f"{spec} is a commit of line {rows.commit_row(conn, cid).line}")
    return line, cid, found.ref if found.ref_kind == "tag" and found.remote is None else None


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


def _member_moves(conn, line: str, old: str | None, new: str) -> bool:
    """Whether a pushed set's member line moves on the registry from OLD to NEW, the member
    the set pins: made where it is missing, fast-forwarded, never rewound nor forced."""
    if old is None:
        return True
    return old != new and _known(conn, old) and transfer.is_ancestor(conn, old, new)


def _member_left(conn, line: str, old: str | None, new: str) -> str | None:
    """One line when the member line LINE stays at OLD on the registry though NEW, the member
    a pushed set pins, is not behind it (the set itself is pushed all the same)."""
    if old is None or old == new or _member_moves(conn, line, old, new):
        return None
    if _known(conn, old) and transfer.is_ancestor(conn, new, old):
        return None  # the registry is already past it
    return (
        f"member line {line} left at {old[:12]} on the registry: the pushed set's member "
        f"{new[:12]} does not descend from it (a member line only fast-forwards)"
    )


def _tags(conn, tips, every: bool) -> list[tuple[str, str, str | None]]:
    """The tags a push carries: those named in the specs, and with EVERY each tag of a pushed
    line (a set's member lines too) whose commit the push makes the registry hold."""
    out = {}
    for line, cid, named in tips:
        q = sa.select(s.refs).where(s.refs.c.line == line, s.refs.c.kind == RefKind.TAG)
        for t in conn.execute(q.order_by(s.refs.c.name)):
            if t.name == named or (every and transfer.is_ancestor(conn, t.target, cid)):
                out[f"{t.line}@{t.name}"] = (t.target, t.message)
    return [(ref, target, message) for ref, (target, message) in out.items()]


def _tag_results(results: list[dict]) -> tuple[list[str], list[str]]:
    """The tags the registry made, and one line for each it holds elsewhere."""
    created, refused = [], []
    for t in results:
        if t["result"] == "created":
            created.append(t["tag"])
        elif t["result"] == "elsewhere":
            at = t["there"][:12] if t["there"] else "gone"
            refused.append(
                f"tag {t['tag']} is at {at} on the registry, not {t['target'][:12]}: "
                "a tag there never moves"
            )
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
    commits = [transfer.new_commit(c) for c in data.get("commits", [])]
    sizes = {f.sha256: f.size for c in commits for f in c.files.values()}
    got = fetch_into_store(remote.client, repo.store, sizes, repo.mint_dir, progress)
    payload = {k: data.get(k, []) for k in ("bases", "commits", "evaluations", "signatures")}
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
    from mint.remote.config import ORIGIN, remote_add
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
            result = fetch(repo, remote, lines, by=by, progress=progress, name=ORIGIN)
        except BaseException:
            repo.close()
            shutil.rmtree(dest, ignore_errors=True) if created else empty_folder(dest)
            raise
        repo.close()
    finally:
        remote.close()
    return CloneResult(str(dest), remote.url, result)
