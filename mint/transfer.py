"""Moving commits between repositories: what to send, the wire format, what a receiver checks.

A sender lists the commits reachable from its heads that the receiver lacks (parents and set
members first), sends the blobs they name (verified on arrival by the store), then the objects.
The receiver recomputes every commit id from its content, checks that everything it refers to
is present, and records it all in one transaction; the line head then moves by
compare-and-swap, fast-forward only unless forced. The wire format is in docs/registry-api.md.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import sqlalchemy as sa

from mint import schema as s
from mint.bases import fingerprint
from mint.commits import rows
from mint.errors import (
    BaseMismatch,
    InvalidObject,
    MissingObjects,
    NotFastForward,
    RefConflict,
    RevisionNotFound,
    WrongKind,
)
from mint.gates.contracts import parse_contract
from mint.ids import Action, Kind, RefKind, Role, iso, object_id, utcnow
from mint.objects import FileEntry, Member, TensorEntry
from mint.refs import check_name
from mint.repo import Repo


@dataclass(frozen=True)
class ImportResult:
    stored: list[str]  # commit ids recorded by this import
    present: list[str]  # commit ids that were already here


# --- what to send ------------------------------------------------------------------


def reachable(conn, heads: list[str], have: list[str]) -> list[str]:
    """Commits reachable from HEADS (through parents and set members), not through HAVE,
    in dependency order: everything a commit refers to comes before it."""
    stop, order, seen = set(have), [], set()
    for head in heads:
        stack = [(head, False)]
        while stack:
            cid, done = stack.pop()
            if done:
                order.append(cid)
                continue
            if cid in seen or cid in stop:
                continue
            seen.add(cid)
            rows.commit_row(conn, cid)  # an unknown head is an error, not an empty push
            stack.append((cid, True))
            stack += [(d, False) for d in reversed(_refers_to(conn, cid))]
    return order


def _refers_to(conn, cid: str) -> list[str]:
    members = [m.commit_id for m in rows.members_of(conn, cid)]
    return rows.parents_of(conn, cid) + members


def blob_sizes(conn, ids: list[str]) -> dict[str, int]:
    """Every blob the commits IDS name, with its size."""
    out: dict[str, int] = {}
    for cid in ids:
        for f in rows.files_of(conn, cid).values():
            out[f.sha256] = f.size
    return out


def export_objects(conn, ids: list[str]) -> dict:
    """The wire form of commits IDS, the bases they are bound to, and their evaluations."""
    commits = [commit_wire(conn, cid) for cid in ids]
    names = sorted({c["base"] for c in commits if c["base"]})
    bases = [_base_wire(conn, n) for n in names]
    return {"bases": bases, "commits": commits, "evaluations": _evaluations_wire(conn, ids)}


def commit_wire(conn, cid: str) -> dict:
    d = rows.detail(conn, cid)
    return {
        "id": d.id,
        "kind": str(d.kind),
        "line": d.line,
        "parents": d.parents,
        "files": {p: [f.sha256, f.size] for p, f in d.files.items()},
        "base": d.base,
        "base_fingerprint": d.base_fingerprint,
        "message": d.message,
        "author": d.author,
        "created_at": d.created_at,
        "meta": d.meta,
        "provenance": d.provenance,
        "peft": d.peft,
        "config": d.config,
        "tensors": [
            [t.name, t.dtype, t.shape, t.sha256, t.nbytes, t.file, t.offset] for t in d.tensors
        ],
        "members": [[str(m.role), m.label, m.commit_id, m.requested] for m in d.members],
    }


def _base_wire(conn, name: str) -> dict:
    row = conn.execute(sa.select(s.bases).where(s.bases.c.name == name)).one()
    return {"name": row.name, "fingerprint": row.fingerprint, "config": row.config}


def _evaluations_wire(conn, ids: list[str]) -> list[dict]:
    e, c = s.evaluations.c, s.contracts.c
    q = (
        sa.select(
            s.evaluations,
            c.name.label("c_name"),
            c.version.label("c_version"),
            c.source.label("c_source"),
        )
        .join(s.contracts, c.id == e.contract_id)
        .where(e.commit_id.in_(ids))
        .order_by(e.id)
    )
    return (
        [
            {
                "commit": r.commit_id,
                "contract": {"name": r.c_name, "version": r.c_version, "source": r.c_source},
                "metrics": r.metrics,
                "source": r.source,
                "evaluator": r.evaluator,
                "data_hash": r.data_hash,
                "by": r.by,
                "at": iso(r.at),
            }
            for r in conn.execute(q)
        ]
        if ids
        else []
    )


# --- receiving -----------------------------------------------------------------------


def new_commit(wire: dict) -> rows.NewCommit:
    """A commit from its wire form, its id recomputed and checked."""
    try:
        c = rows.NewCommit(
            kind=Kind(wire["kind"]),
            line=check_name("line", wire["line"]),
            parents=[str(p) for p in wire["parents"]],
            files={str(p): FileEntry(str(b), int(n)) for p, (b, n) in wire["files"].items()},
            base=wire["base"],
            base_fingerprint=wire["base_fingerprint"],
            message=str(wire["message"]),
            author=str(wire["author"]),
            created_at=str(wire["created_at"]),
            meta=dict(wire["meta"]),
            provenance=dict(wire["provenance"]),
            peft=wire["peft"],
            config=wire["config"],
            tensors=[
                TensorEntry(str(n), str(t), [int(x) for x in sh], str(h), int(b), str(f), int(o))
                for n, t, sh, h, b, f, o in wire["tensors"]
            ],
            members=[
                Member(Role(r), str(label), str(m), str(q)) for r, label, m, q in wire["members"]
            ],
        )
        dt.datetime.fromisoformat(c.created_at)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InvalidObject(f"malformed commit object: {type(exc).__name__}: {exc}") from None
    if c.id != wire.get("id"):
        raise InvalidObject(f"commit object {str(wire.get('id'))[:12]} hashes to {c.id[:12]}")
    return c


def import_objects(repo: Repo, payload: dict, *, pushed_by: str | None) -> ImportResult:
    """Record the bases, commits and evaluations of PAYLOAD that are not here yet.

    Everything is checked first; all of it is then recorded in one transaction, which also
    finds every blob the commits name in the store (see Database.guard_blobs)."""
    try:
        commits = [new_commit(w) for w in payload.get("commits", [])]
        bases, evaluations = list(payload.get("bases", [])), list(payload.get("evaluations", []))
    except AttributeError:
        raise InvalidObject("an object payload is {bases, commits, evaluations}") from None
    with repo.db.write() as conn:
        repo.db.guard_blobs(conn, exclusive=False)
        for b in bases:
            _receive_base(conn, b)
        stored, present = _receive_commits(repo, conn, commits, pushed_by)
        for ev in evaluations:
            _receive_evaluation(conn, ev, pushed_by)
    return ImportResult(stored, present)


def _receive_base(conn, wire: dict) -> None:
    try:
        name, fp, config = str(wire["name"]), str(wire["fingerprint"]), dict(wire["config"])
    except (KeyError, TypeError, ValueError):
        raise InvalidObject("malformed base object") from None
    if fingerprint(config) != fp:
        raise InvalidObject(f"base {name}'s config does not hash to its fingerprint {fp[:12]}")
    row = conn.execute(sa.select(s.bases).where(s.bases.c.name == check_name("base", name)))
    found = row.first()
    if found is None:
        values = dict(name=name, fingerprint=fp, config=config, source=None, created_at=utcnow())
        conn.execute(s.bases.insert().values(**values))
    elif found.fingerprint != fp:
        raise BaseMismatch(
            f"base {name} here has fingerprint {found.fingerprint[:12]}, the pushed one {fp[:12]}"
        )


def _receive_commits(repo: Repo, conn, commits, pushed_by) -> tuple[list[str], list[str]]:
    stored, present = [], []
    for c in commits:
        cid = c.id
        if conn.execute(sa.select(s.commits.c.id).where(s.commits.c.id == cid)).first():
            present.append(cid)
            continue
        _check_refers(repo, conn, c)
        rows.insert_commit(conn, c, dt.datetime.fromisoformat(c.created_at))
        if pushed_by is not None:
            q = s.commits.update().where(s.commits.c.id == cid).values(pushed_by=pushed_by)
            conn.execute(q)
        stored.append(cid)
    return stored, present


def _check_refers(repo: Repo, conn, c: rows.NewCommit) -> None:
    """Parents and members are recorded, blobs stored (at the sizes given), the base known."""
    ids = c.parents + [m.commit_id for m in c.members]
    if ids:
        known = {
            r[0] for r in conn.execute(sa.select(s.commits.c.id).where(s.commits.c.id.in_(ids)))
        }
        missing = [i for i in ids if i not in known]
        if missing:
            raise MissingObjects("commits", missing)
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


def _receive_evaluation(conn, wire: dict, pushed_by: str | None) -> None:
    try:
        contract, commit = dict(wire["contract"]), str(wire["commit"])
        name, version = str(contract["name"]), int(contract["version"])
        body = parse_contract(str(contract["source"]), f"contract {name}")
        at = dt.datetime.fromisoformat(str(wire["at"]))
        row = dict(
            commit_id=commit,
            metrics=dict(wire["metrics"]),
            source=str(wire["source"]),
            evaluator=wire.get("evaluator"),
            data_hash=wire.get("data_hash"),
            by=str(wire["by"]),
            at=at,
        )
    except (KeyError, TypeError, ValueError):
        raise InvalidObject("malformed evaluation object") from None
    if body["name"] != name:
        raise InvalidObject(f"contract source names {body['name']}, not {name}")
    source = str(contract["source"])
    row["contract_id"] = _receive_contract(conn, name, version, body, source, pushed_by)
    row["pushed_by"] = pushed_by
    e = s.evaluations.c
    same = sa.select(e.id).where(
        e.commit_id == commit, e.contract_id == row["contract_id"], e.by == row["by"], e.at == at
    )
    if conn.execute(same).first() is None:
        conn.execute(s.evaluations.insert().values(**row))


def _receive_contract(conn, name: str, version: int, body: dict, source: str, by) -> str:
    cid = object_id({"version": version, "body": body})
    c = s.contracts.c
    found = conn.execute(sa.select(c.id).where(c.name == name, c.version == version)).scalar()
    if found is None:
        conn.execute(
            s.contracts.insert().values(
                id=cid,
                name=name,
                version=version,
                channel=body["channel"],
                body=body,
                lines=body["lines"],
                source=source,
                created_at=utcnow(),
                created_by=by or "push",
            )
        )
    elif found != cid:
        raise RefConflict(f"contract {name} v{version}", cid, found)
    return cid


# --- moving a line head -------------------------------------------------------------------


def move_head(repo: Repo, line: str, old: str | None, new: str, *, force: bool, by: str) -> None:
    """Point LINE at NEW if it is still at OLD (None: the line is new); NEW must descend from
    OLD unless FORCE. The move is logged in ref_history as a head move."""
    check_name("line", line)
    with repo.db.write() as conn:
        row = rows.commit_row(conn, new)
        if row.line != line:
            raise WrongKind(f"{new[:12]} is a commit of line {row.line}, not {line}")
        current = conn.execute(sa.select(s.lines).where(s.lines.c.name == line)).first()
        head = current.head if current else None
        if head != old:
            raise RefConflict(f"line {line}", old, head)
        if head == new:
            return
        if head is not None and not force and not is_ancestor(conn, head, new):
            raise NotFastForward(line, head, new)
        _set_head(conn, line, Kind(row.kind), head, new)
        action = Action.FORCE if force and head is not None else Action.PUSH
        conn.execute(
            s.ref_history.insert().values(
                line=line,
                name="HEAD",
                kind=RefKind.HEAD,
                action=action,
                old=head,
                new=new,
                by=by,
                at=utcnow(),
            )
        )


def _set_head(conn, line: str, kind: Kind, head: str | None, new: str) -> None:
    count = sa.select(sa.func.count()).where(s.commits.c.line == line).scalar_subquery()
    if head is None:
        values = dict(name=line, kind=kind, head=new, commit_count=count, created_at=utcnow())
        conn.execute(s.lines.insert().values(**values))
        return
    q = s.lines.update().where(s.lines.c.name == line, s.lines.c.head == head)
    if conn.execute(q.values(head=new, commit_count=count)).rowcount != 1:
        raise RefConflict(f"line {line}", head, None)


def is_ancestor(conn, ancestor: str, descendant: str) -> bool:
    """Whether ANCESTOR is DESCENDANT or one of its ancestors (through parents)."""
    cp = s.commit_parents
    seed = sa.select(sa.literal(descendant, sa.String(64)).label("id"))
    anc = seed.cte("anc", recursive=True)
    anc = anc.union(sa.select(cp.c.parent_id).join(anc, cp.c.commit_id == anc.c.id))
    q = sa.select(anc.c.id).where(anc.c.id == ancestor).limit(1)
    return conn.execute(q).first() is not None


def line_head(repo: Repo, line: str) -> str | None:
    """The head of LINE, or None when there is no such line."""
    with repo.db.read() as conn:
        row = conn.execute(sa.select(s.lines.c.head).where(s.lines.c.name == line)).first()
    if row is None:
        return None
    if row.head is None:
        raise RevisionNotFound(line, "line has no commits")
    return row.head
