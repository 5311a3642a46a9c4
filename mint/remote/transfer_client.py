"""push: commits from a local repository to a registry, the git way (fetch and clone, the
other way, are in `mint.remote.fetch_client`).

Push takes three requests: which blobs the registry lacks and where its heads of the pushed
lines are (one answer); those blobs, streamed as one pack (hashed on arrival by the
registry); and the commit objects (whose ids it recomputes) with their bases and evaluations,
together with each line head's move by compare-and-swap from where the registry had it
(fast-forward only, unless forced) and the tags, in the registry's one transaction. A pushed
set's member lines move in that same transaction, as named lines do, but only forward.
Tags travel and never move; channels never travel.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

from mint import schema as s
from mint.commits import rows
from mint.errors import PushRejected, RegistryUnreachable, WrongKind
from mint.exchange.heads import is_ancestor
from mint.exchange.receiving import HeadMove
from mint.exchange.sending import blob_sizes, export_objects, reachable, recent
from mint.ids import RefKind
from mint.refs import resolve
from mint.refs.revisions import check_name
from mint.remote.blobs import MISSING_BATCH, Progress, missing, missing_and_heads, upload
from mint.remote.repo import RemoteRepo
from mint.repo import Repo

FETCH_FIRST = "fetch, then push again"
NOT_FF = "ours does not descend from it (not a fast-forward): " + FETCH_FIRST
MOVED = "it moved while we pushed: " + FETCH_FIRST
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
    moves = [HeadMove(line, old, new, force) for line, old, new, must in plan.moves if must]
    moves += [HeadMove(line, old, new) for line, old, new, must in plan.members if must]
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
    heads: list[HeadMove] | None = None,
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
    signatures = _with_their_commits(payload.get("signatures", []), batches)
    moves = [{"line": m.line, "old": m.old, "new": m.new, "force": m.force} for m in heads or []]
    made = [{"tag": ref, "rev": target, "message": message} for ref, target, message in tags or []]
    stored: list[str] = []
    kept = 0
    answer: dict = {"stored": [], "present": [], "heads": [], "tags": []}
    for i, commits in enumerate(batches):
        last = i == len(batches) - 1
        body = {
            "bases": payload["bases"] if i == 0 else [],
            "commits": commits,
            "evaluations": payload["evaluations"] if last else [],
            "signatures": signatures[i],
            "heads": moves if last else [],
            "tags": made if last else [],
        }
        if any(body.values()):
            answer = remote.client.post("/objects", body)
            stored += answer["stored"]
            kept += answer.get("signatures", 0)
    return {**answer, "stored": stored, "signatures": kept}


def _with_their_commits(signatures: list[dict], batches: list[list[dict]]) -> list[list[dict]]:
    """SIGNATURES split by the request (one a batch of BATCHES) that carries each one's
    commit, which records it in the transaction that keeps its bundles (a registry keeps a
    bundle by a key it does not trust only with a commit it records); those of commits the
    registry holds already (a set's members, which its bundle names) go with the first."""
    at = {c["id"]: i for i, commits in enumerate(batches) for c in commits if isinstance(c, dict)}
    out: list[list[dict]] = [[] for _ in batches]
    for sig in signatures:
        out[at.get(sig.get("commit"), 0)].append(sig)
    return out


def _tips(repo: Repo, specs: list[str]) -> _Tips:
    """The commits SPECS name, and the blobs of their RECENT nearest commits (at most
    MISSING_BATCH blobs): the registry is rarely further behind, and when it is, the rest is
    asked for once its heads are known."""
    with repo.db.read() as conn:
        tips = [_tip(conn, spec) for spec in specs]
        history = recent(conn, [cid for _, cid, _ in tips], RECENT)
        blobs = sorted(blob_sizes(conn, history))[:MISSING_BATCH]
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
            if line not in named and (other is None or is_ancestor(conn, other, m.commit_id)):
                found[line] = m.commit_id
    return sorted(found.items())


def _plan(repo: Repo, found: _Tips, heads: dict, tags: bool, force: bool) -> _Plan:
    """What to send: every commit reachable from the tips that the registry lacks."""
    tips = found.tips
    with repo.db.read() as conn:
        have = [h for h in heads.values() if h and known(conn, h)]
        moves = [(line, heads.get(line), cid) for line, cid, _ in tips]
        moves = [(*m, _needs_move(conn, *m, force=force)) for m in moves]
        members = [(line, heads.get(line), cid) for line, cid in found.members]
        notes = [n for m in members if (n := _member_left(conn, *m))]
        members = [(*m, _member_moves(conn, *m)) for m in members]
        ids = reachable(conn, [cid for _, cid, _ in tips], have)
        sending = ids + [cid for _, cid, _ in tips if cid not in ids]  # their evaluations too
        payload = export_objects(conn, sending)
        sizes = blob_sizes(conn, ids)
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


def known(conn, cid: str) -> bool:
    """Whether commit CID is recorded here."""
    return conn.execute(sa.select(s.commits.c.id).where(s.commits.c.id == cid)).first() is not None


def _needs_move(conn, line: str, old: str | None, new: str, *, force: bool) -> bool:
    """Whether the registry's head must move from OLD to NEW. What the registry would refuse
    after the upload is refused here, before a byte is sent."""
    if old is None or force:
        return old != new
    if old == new:
        return False
    if not known(conn, old):
        raise PushRejected(
            line, new, old, "the registry has commits this repository lacks: " + FETCH_FIRST
        )
    if is_ancestor(conn, old, new):
        return True
    if is_ancestor(conn, new, old):
        return False  # the registry is already past it
    raise PushRejected(line, new, old, NOT_FF)


def _member_moves(conn, line: str, old: str | None, new: str) -> bool:
    """Whether a pushed set's member line moves on the registry from OLD to NEW, the member
    the set pins: made where it is missing, fast-forwarded, never rewound nor forced."""
    if old is None:
        return True
    return old != new and known(conn, old) and is_ancestor(conn, old, new)


def _member_left(conn, line: str, old: str | None, new: str) -> str | None:
    """One line when the member line LINE stays at OLD on the registry though NEW, the member
    a pushed set pins, is not behind it (the set itself is pushed all the same)."""
    if old is None or old == new or _member_moves(conn, line, old, new):
        return None
    if known(conn, old) and is_ancestor(conn, new, old):
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
            if t.name == named or (every and is_ancestor(conn, t.target, cid)):
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
