"""What a receiver checks and records: a payload of commits that arrived by a push or a fetch.

The receiver recomputes every commit id from its content (mint.exchange.arriving), checks that
everything it refers to is present, and records it all in one transaction; the line heads then
move by compare-and-swap (mint.exchange.heads), fast-forward only unless forced, and tags are
made where they do not exist. The wire format is in docs/registry-api.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import sqlalchemy as sa

from mint import schema as s
from mint.bases import fingerprint
from mint.commits import rows
from mint.db import insert_new, is_unique_violation
from mint.errors import (
    BaseMismatch,
    Forbidden,
    InvalidObject,
    MissingObjects,
    NotFastForward,
    RefConflict,
    RefExists,
    ReservedName,
    WrongKind,
)
from mint.exchange import possession, received
from mint.exchange.arriving import new_commit
from mint.exchange.heads import member_lines, move_head_in
from mint.gates.contracts import contract_row, receive_contract
from mint.gates.evaluations import evaluation_values, insert_evaluation
from mint.ids import Kind, RefKind, utcnow
from mint.refs import RefsContainer, check_name
from mint.refs.tags import tag_in
from mint.repo import Repo
from mint.signing.commits import receive_signatures


@dataclass(frozen=True)
class HeadMove:
    """Move LINE's head from OLD (None: a new line) to NEW, by compare-and-swap."""

    line: str
    old: str | None
    new: str
    force: bool = False


@dataclass(frozen=True)
class HeadMoved:
    line: str
    old: str | None
    new: str
    head: str | None  # where the head is now
    result: str  # moved | conflict (it was not at OLD) | not-fast-forward


@dataclass(frozen=True)
class TagMade:
    tag: str  # LINE@TAG
    target: str
    there: str | None  # where the tag points now (None: nowhere)
    result: str  # created | present (already at TARGET) | elsewhere (kept where it was)


@dataclass(frozen=True)
class ImportResult:
    stored: list[str]  # commit ids recorded by this import
    present: list[str]  # commit ids that were already here
    heads: list[HeadMoved] = field(default_factory=list)
    tags: list[TagMade] = field(default_factory=list)
    signatures: int = 0  # bundles kept with commits by this import


@dataclass(frozen=True)
class Admission:
    """What the sender of a payload may do here. A registry makes one from the pushing token;
    a fetch or clone into this repository takes the registry's objects (LOCAL)."""

    by: str | None = None  # the pusher, recorded as pushed_by (None: a fetch)
    # raises Forbidden for a line out of reach (a fetch into this repository reaches every one)
    check_line: Callable[[str], None] = lambda line: None
    add_contracts: bool = True  # may record contract versions that are not here yet
    # A token limited to lines: the lines it may read. A stored blob it names must be held by
    # a commit of those lines or uploaded by this token (mint.exchange.possession); None: no proof.
    reads_line: Callable[[str], bool] | None = None


LOCAL = Admission()


def import_objects(
    repo: Repo,
    payload: dict,
    *,
    pushed_by: str | None,
    admission: Admission | None = None,
    heads: list[HeadMove] | None = None,
    tags: list[tuple[str, str, str | None]] | None = None,
    also: Callable | None = None,
) -> ImportResult:
    """Record the bases, commits and evaluations of PAYLOAD that are not here yet, then make
    the HEADS moves and create the TAGS ((LINE@TAG, target, message)) in the same transaction;
    ALSO(conn, commits), if given, writes what goes with them there (a proposal of one).

    Every commit is checked first (see mint.exchange.arriving); all of it is then checked
    against what is here and recorded in one transaction, which also finds every blob the
    commits name in the store (see Database.guard_blobs). Anything refused leaves nothing."""
    admission = admission or replace(LOCAL, by=pushed_by)
    if not isinstance(payload, dict):
        raise InvalidObject("an object payload is {bases, commits, evaluations}")
    commits = [new_commit(w) for w in received.listing(payload.get("commits", []), "commits")]
    bases = received.listing(payload.get("bases", []), "bases")
    evaluations = received.listing(payload.get("evaluations", []), "evaluations")
    with repo.db.write() as conn:
        repo.db.guard_blobs(conn, exclusive=False)
        for b in bases:
            _receive_base(conn, b)
        stored, present = _receive_commits(repo, conn, commits, admission)
        for ev in evaluations:
            _receive_evaluation(conn, ev, admission)
        kept = receive_signatures(conn, payload, admission, stored)
        by = admission.by or "fetch"
        moved = [_push_head(conn, m, admission, by) for m in heads or []]
        made = [_push_tag(conn, *t, admission, by) for t in tags or []]
        if also is not None:
            also(conn, commits)
    return ImportResult(stored, present, moved, made, kept)


def _push_head(conn, m: HeadMove, admission: Admission, by: str) -> HeadMoved:
    """M, made in the import's transaction. A head that moved meanwhile, or that NEW does not
    descend from (unless forced), is reported, not raised: the objects are stored anyway, and
    the other lines move. A set's head needs the sender to reach every member's line."""
    admission.check_line(m.line)
    for line in member_lines(conn, m.new):
        admission.check_line(line)
    try:
        with conn.begin_nested():
            move_head_in(conn, m.line, m.old, m.new, force=m.force, by=by)
        result = "moved"
    except RefConflict:
        result = "conflict"
    except NotFastForward:
        result = "not-fast-forward"
    return HeadMoved(m.line, m.old, m.new, RefsContainer(conn).head(m.line), result)


def _push_tag(
    conn, ref: str, target: str, message: str | None, admission: Admission, by: str
) -> TagMade:
    """Tag REF (LINE@TAG) at TARGET unless it exists: a tag never moves by a push."""
    line, at, name = ref.partition("@")
    if not at:
        raise InvalidObject(f"a pushed tag is LINE@TAG, not {received.shown(ref)}")
    admission.check_line(line)
    for member_line in member_lines(conn, target):
        admission.check_line(member_line)
    existing = RefsContainer(conn).get(line, name)
    if existing is not None and existing.kind == RefKind.TAG:
        kept = "present" if existing.target == target else "elsewhere"
        return TagMade(ref, target, existing.target, kept)
    try:
        with conn.begin_nested():
            tag_in(conn, ref, target, by=by, message=message)
    except ReservedName:  # a channel's name: refused, with the whole push, as POST /tags does
        raise
    except (RefExists, RefConflict):  # made by another push meanwhile
        now = RefsContainer(conn).get(line, name)
        return TagMade(ref, target, now.target if now else None, "elsewhere")
    return TagMade(ref, target, target, "created")


def _receive_base(conn, wire: object) -> None:
    if not isinstance(wire, dict) or set(wire) != {"name", "fingerprint", "config"}:
        raise InvalidObject(
            f"base object is {received.shown(wire)}: {{name, fingerprint, config}}"
        )
    name = check_name("base", received.text(wire["name"], "a base name", max_len=200))
    fp = received.hex64(wire["fingerprint"], f"base {name}'s fingerprint")
    config = received.table(wire["config"], f"base {name}'s config")
    if fingerprint(config) != fp:
        raise InvalidObject(f"base {name}'s config does not hash to its fingerprint {fp[:12]}")
    values = dict(name=name, fingerprint=fp, config=config, source=None, created_at=utcnow())
    found = conn.execute(sa.select(s.bases).where(s.bases.c.name == name)).first()
    if found is None and insert_new(conn, s.bases, values):
        return
    found = found or conn.execute(sa.select(s.bases).where(s.bases.c.name == name)).one()
    if found.fingerprint != fp:  # another push may have registered it a moment ago
        raise BaseMismatch(
            f"base {name} here has fingerprint {found.fingerprint[:12]}, the pushed one {fp[:12]}"
        )


def _receive_commits(repo: Repo, conn, commits, admission: Admission):
    """Record the commits not here yet; the sender must reach each one's line and, for a set,
    the line of every member (a set is a way to read its members)."""
    stored, present = [], []
    for c in commits:
        admission.check_line(c.line)
        cid = c.id
        here = conn.execute(sa.select(s.commits.c.id).where(s.commits.c.id == cid)).first()
        if here is None:
            _check_refers(repo, conn, c)
            _check_possession(conn, c, admission)
        if here is None and _insert(conn, c, admission.by):
            stored.append(cid)
        else:
            present.append(cid)
        for line in member_lines(conn, cid):
            admission.check_line(line)
    return stored, present


def _insert(conn, c: rows.NewCommit, pushed_by: str | None) -> bool:
    """Record C; False when a push of the same commit recorded it a moment ago (its id is
    its content: the same commit)."""
    try:
        with conn.begin_nested():
            rows.insert_commit(conn, c, received.timestamp(c.created_at, "created_at"))
    except sa.exc.IntegrityError as exc:
        if not is_unique_violation(exc):
            raise
        return False
    if pushed_by is not None:
        q = s.commits.update().where(s.commits.c.id == c.id).values(pushed_by=pushed_by)
        conn.execute(q)
    return True


def _check_refers(repo: Repo, conn, c: rows.NewCommit) -> None:
    """Parents and members are recorded (members are adapters on the set's base, as
    `set commit` pins them), blobs stored at the sizes given, the base known, the line of
    this kind."""
    ids = c.parents + [m.commit_id for m in c.members]
    if ids:
        cc = s.commits.c
        q = sa.select(cc.id, cc.kind, cc.base, cc.base_fingerprint).where(cc.id.in_(ids))
        known = {r.id: r for r in conn.execute(q)}
        missing = [i for i in ids if i not in known]
        if missing:
            raise MissingObjects("commits", missing)
        sets = [m.commit_id for m in c.members if known[m.commit_id].kind != Kind.ADAPTER]
        if sets:
            raise WrongKind(f"a set's members are adapters; {sets[0][:12]} is a set")
        for m in c.members:
            row = known[m.commit_id]
            if row.base_fingerprint != c.base_fingerprint:
                raise BaseMismatch(
                    f"{m.role} {m.label} = {m.commit_id[:12]} is bound to base {row.base} "
                    f"({str(row.base_fingerprint)[:12]}), but the set's base is {c.base} "
                    f"({str(c.base_fingerprint)[:12]})"
                )
    blobs = [f.sha256 for f in c.files.values()]
    missing = [b for b in blobs if not repo.store.has(b)]
    if missing:
        raise MissingObjects("blobs (push them first)", missing)
    for path, f in c.files.items():
        if repo.store.size(f.sha256) != f.size:
            raise InvalidObject(f"{path} is {f.size} bytes in the commit, not its blob's size")
    line = conn.execute(sa.select(s.lines.c.kind).where(s.lines.c.name == c.line)).scalar()
    if line is not None and line != c.kind:
        raise WrongKind(f"line {c.line} holds {line} commits, not {c.kind}s")
    if c.base is not None:
        fp = conn.execute(
            sa.select(s.bases.c.fingerprint).where(s.bases.c.name == c.base)
        ).scalar()
        if fp != c.base_fingerprint:
            raise MissingObjects(
                f"base {c.base} (push it with its commits)", [c.base_fingerprint or ""]
            )


def _check_possession(conn, c: rows.NewCommit, admission: Admission) -> None:
    """A limited token names only blobs it may read or has uploaded: knowing a blob's id is
    not holding its bytes (mint.exchange.possession). Two queries for all of C's blobs, not
    one each."""
    if admission.reads_line is None:
        return
    blobs = [f.sha256 for f in c.files.values()]
    who = admission.by or ""
    refused = possession.unproven(conn, blobs, token=who, may_read=admission.reads_line)
    if refused:
        raise Forbidden(
            who,
            f"name blob {refused[0][:12]}: no commit of the token's lines holds it; "
            "upload its bytes (PUT /api/v1/blobs/{id}) to show the token has them",
        )


EVALUATION_KEYS = {"commit", "contract", "metrics", "source", "evaluator", "data_hash", "by", "at"}


def _receive_evaluation(conn, wire: object, admission: Admission) -> None:
    """One evaluation, checked as `mint eval` checks it (evaluation_values), of a commit
    here or in this payload, under a contract version recorded or admitted here. `by` is who
    ran it, as the sender recorded; `pushed_by` the token that brought it."""
    if not isinstance(wire, dict) or set(wire) != EVALUATION_KEYS:
        got = sorted(wire) if isinstance(wire, dict) else wire
        raise InvalidObject(f"malformed evaluation object: {received.shown(got)}")
    commit = received.hex64(wire["commit"], "an evaluation's commit")
    line = conn.execute(sa.select(s.commits.c.line).where(s.commits.c.id == commit)).scalar()
    if line is None:
        raise MissingObjects("commits (an evaluation's: push it with its commit)", [commit])
    admission.check_line(line)
    contract_id = receive_contract(
        conn, wire["contract"], by=admission.by or "fetch", may_add=admission.add_contracts
    )
    values = evaluation_values(
        contract_row(conn, contract_id).body,
        wire["metrics"],
        source=wire["source"],
        evaluator=wire["evaluator"],
        data_hash=wire["data_hash"],
        by=wire["by"],
    )
    # A pusher's clock may not put an evaluation in the registry's future; a fetch keeps the
    # registry's times, which a laptop's slow clock cannot judge.
    latest = utcnow() + received.CLOCK_SKEW if admission.by is not None else None
    at = received.timestamp(wire["at"], "an evaluation's time", not_after=latest)
    e = s.evaluations.c
    same = sa.select(e.id).where(
        e.commit_id == commit, e.contract_id == contract_id, e.by == values["by"], e.at == at
    )
    if conn.execute(same).first() is None:
        row = dict(commit_id=commit, contract_id=contract_id, at=at, **values)
        insert_evaluation(conn, pushed_by=admission.by, **row)
