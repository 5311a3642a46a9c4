"""Commit rows: writing one commit with its files and tensors, and reading them back."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mint import schema as s
from mint.commits.indexes import index_commit
from mint.commits.trees import tree_of as tree_of  # where a commit's content id is made
from mint.errors import RevisionNotFound
from mint.ids import CommitId, Kind, RefKind, Role, iso, object_id, utcnow
from mint.objects import CommitDetail, CommitInfo, FileEntry, Member, TensorEntry
from mint.refs.decorations import decorations


@dataclass(frozen=True)
class NewCommit:
    """Everything a commit records. Its id is the hash of all of it."""

    kind: Kind
    line: str
    parents: list[str]
    files: dict[str, FileEntry]
    base: str | None
    base_fingerprint: str | None
    message: str
    author: str
    created_at: str
    meta: dict
    provenance: dict
    peft: dict | None = None
    config: dict | None = None
    tensors: list[TensorEntry] = field(default_factory=list)
    members: list[Member] = field(default_factory=list)

    @property
    def tree(self) -> str:
        """The content alone: files, base and members. Equal trees mean nothing changed."""
        return tree_of(self.files, self.base_fingerprint, self.members)

    @property
    def id(self) -> CommitId:
        return CommitId(
            object_id(
                {
                    "kind": self.kind,
                    "line": self.line,
                    "tree": self.tree,
                    "parents": self.parents,
                    "base": self.base,
                    "message": self.message,
                    "author": self.author,
                    "created_at": self.created_at,
                    "meta": self.meta,
                    "provenance": self.provenance,
                }
            )
        )


def build_commit(
    kind: Kind,
    line: str,
    *,
    parents: list[str],
    files: dict[str, FileEntry],
    base: str | None,
    base_fingerprint: str | None,
    message: str,
    author: str,
    created_at: str | None = None,
    meta: dict | None = None,
    provenance: dict | None = None,
    peft: dict | None = None,
    config: dict | None = None,
    tensors: list[TensorEntry] = (),
    members: list[Member] = (),
) -> NewCommit:
    """The one builder of a `NewCommit`, whichever door it comes through (a commit, a set
    commit or derive, a commit that arrived by push, fetch or clone): CREATED_AT defaults to
    now, and every mutable field is copied, so a caller's later change cannot alter an id."""
    return NewCommit(
        kind=Kind(kind),
        line=line,
        parents=list(parents),
        files=dict(files),
        base=base,
        base_fingerprint=base_fingerprint,
        message=message,
        author=author,
        created_at=utcnow().isoformat() if created_at is None else created_at,
        meta=dict(meta or {}),
        provenance=dict(provenance or {}),
        peft=peft,
        config=config,
        tensors=list(tensors),
        members=list(members),
    )


def newest_with_tree(conn: Connection, line: str, kind: Kind, tree: str) -> CommitId | None:
    """The newest KIND commit of LINE whose content (files, base and members) is TREE."""
    c = s.commits.c
    q = sa.select(c.id).where(c.line == line, c.kind == kind, c.tree == tree)
    row = conn.execute(q.order_by(c.created_at.desc(), c.id).limit(1)).first()
    return CommitId(row.id) if row else None


def insert_commit(conn: Connection, c: NewCommit, created_at) -> CommitId:
    """The commit's row and its parents, files, tensors and members (no ref moves)."""
    cid = c.id
    row = {f: getattr(c, f) for f in _COMMIT_COLUMNS}
    conn.execute(
        s.commits.insert().values(
            id=cid, tree=c.tree, created_at=created_at, source_sha=c.provenance.get("sha"), **row
        )
    )
    children = [
        (s.commit_parents, [{"idx": i, "parent_id": p} for i, p in enumerate(c.parents)]),
        (s.files, [{"path": p, "blob_id": f.sha256, "size": f.size} for p, f in c.files.items()]),
        (s.tensors, [{f: getattr(t, f) for f in _TENSOR_COLUMNS} for t in c.tensors]),
        (s.set_members, [_member_row(m) for m in c.members]),
    ]
    for table, values in children:
        if values:
            conn.execute(table.insert(), [{"commit_id": cid, **v} for v in values])
    index_commit(conn, cid, c.meta)
    return cid


_COMMIT_COLUMNS = (
    "kind",
    "line",
    "base",
    "base_fingerprint",
    "message",
    "author",
    "meta",
    "provenance",
    "peft",
    "config",
)
_TENSOR_COLUMNS = ("file", "name", "dtype", "shape", "sha256", "nbytes", "offset")


def _member_row(m: Member) -> dict:
    return {"role": m.role, "label": m.label, "member_id": m.commit_id, "requested": m.requested}


def page_of_lines(limit: int | None, after: str | None) -> dict:
    """The parameters of a page of lines (`lines_page`): at most LIMIT (one or more) lines
    whose names sort after AFTER."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be 1 or more, not {limit}")
    return {"limit": limit, "after": after}


def lines_page(q, *, paged: bool, after: bool):
    """Q (a select from lines) in name order: the lines after the name `:after` (with AFTER),
    at most `:limit` (PAGED). One range of the unique index on names, however many lines
    there are. The page is in bound parameters (`page_of_lines`): one statement built for a
    shape of page serves every page of that shape."""
    if after:
        q = q.where(s.lines.c.name > sa.bindparam("after"))
    q = q.order_by(s.lines.c.name)
    return q.limit(sa.bindparam("limit", type_=sa.Integer)) if paged else q


def commit_row(conn: Connection, cid: str):
    row = conn.execute(_commit_by_id(), {"cid": cid}).first()
    if row is None:
        raise RevisionNotFound(cid, "no such commit")
    return row


@functools.cache
def _commit_by_id():
    # Built once: a statement built for each call costs more than its execution (issue 24),
    # and a statement object keeps its cache key, so SQLAlchemy finds its compiled form at once.
    return sa.select(s.commits).where(s.commits.c.id == sa.bindparam("cid"))


def parents_of(conn: Connection, cid: str) -> list[str]:
    q = sa.select(s.commit_parents.c.parent_id).where(s.commit_parents.c.commit_id == cid)
    return [r[0] for r in conn.execute(q.order_by(s.commit_parents.c.idx))]


def _parents_of_many(conn: Connection, ids: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for i in range(0, len(ids), 500):
        for child, parent in conn.execute(_parents_of_ids(), {"ids": ids[i : i + 500]}):
            out.setdefault(child, []).append(parent)
    return out


@functools.cache
def _parents_of_ids():
    """The parents of the commits :ids (an expanding list), built once."""
    cp = s.commit_parents.c
    q = sa.select(cp.commit_id, cp.parent_id)
    return q.where(cp.commit_id.in_(sa.bindparam("ids", expanding=True))).order_by(
        cp.commit_id, cp.idx
    )


def _info(row, parents: list[str], refs: list) -> CommitInfo:
    return CommitInfo(
        id=CommitId(row.id),
        kind=Kind(row.kind),
        line=row.line,
        parents=parents,
        message=row.message,
        author=row.author,
        created_at=iso(row.created_at),
        meta=row.meta or {},
        refs=refs,
    )


def infos(conn: Connection, rows) -> list[CommitInfo]:
    """ROWS (of the commits table) as `log` shows them: with their parents, and the names
    that point at each (its line's head, tags, channels, remotes' refs)."""
    rows = list(rows)
    ids = [r.id for r in rows]
    parents, refs = _parents_of_many(conn, ids), decorations(conn, ids, {r.line for r in rows})
    return [_info(r, parents.get(r.id, []), refs.get(r.id, [])) for r in rows]


def files_of(conn: Connection, cid: str) -> dict[str, FileEntry]:
    q = sa.select(s.files.c.path, s.files.c.blob_id, s.files.c.size).where(
        s.files.c.commit_id == cid
    )
    return {r.path: FileEntry(r.blob_id, r.size) for r in conn.execute(q.order_by(s.files.c.path))}


def tensors_of(
    conn: Connection, cid: str, offset: int = 0, limit: int | None = None
) -> list[TensorEntry]:
    """The commit's tensor index, by file and name (from OFFSET, at most LIMIT rows). Hundreds
    of rows: they are fetched at once and their shapes parsed as one JSON document, not one
    JSON value per row."""
    t = s.tensors.c
    q = (
        sa.select(t.name, t.dtype, sa.cast(t.shape, sa.Text), t.sha256, t.nbytes, t.file, t.offset)
        .where(t.commit_id == cid)
        .order_by(t.file, t.name)
    )
    if offset or limit is not None:
        q = q.offset(offset).limit(limit)
    found = conn.execute(q).all()
    shapes = json.loads("[" + ",".join(r[2] for r in found) + "]")
    return [
        TensorEntry(name, dtype, shape, sha, nbytes, file, offset)
        for (name, dtype, _, sha, nbytes, file, offset), shape in zip(found, shapes)
    ]


def members_of(conn: Connection, cid: str) -> list[Member]:
    q = sa.select(s.set_members).where(s.set_members.c.commit_id == cid)
    order = list(Role)
    rows = sorted(conn.execute(q), key=lambda r: (order.index(Role(r.role)), r.label))
    return [Member(Role(r.role), r.label, CommitId(r.member_id), r.requested) for r in rows]


def tags_of(conn: Connection, cid: str) -> list[str]:
    # By target alone, the kind checked here: with `kind = 'tag'` in the query, SQLite (no
    # statistics) would walk every tag in the index on (kind, line, name, target).
    q = sa.select(s.refs.c.line, s.refs.c.name, s.refs.c.kind).where(s.refs.c.target == cid)
    return sorted(f"{r.line}@{r.name}" for r in conn.execute(q) if r.kind == RefKind.TAG)


def tensor_totals(conn: Connection, cid: str) -> tuple[int, int]:
    """(rows, bytes) of the commit's tensor index, counted by the database."""
    t = s.tensors.c
    q = sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(t.nbytes), 0))
    count, nbytes = conn.execute(q.where(t.commit_id == cid)).one()
    return int(count), int(nbytes)


def detail(
    conn: Connection, cid: str, tensors: str = "all", offset: int = 0, limit: int | None = None
) -> CommitDetail:
    """Everything recorded for commit CID. TENSORS "all": its whole tensor table (a page of it
    from OFFSET, with LIMIT); "summary": none, only their count and bytes."""
    row = commit_row(conn, cid)
    whole = tensors == "all" and not offset and limit is None
    kids = _children(conn, cid, totals=not whole)
    if whole:
        table = tensors_of(conn, cid)
        count, nbytes = len(table), sum(t.nbytes for t in table)
    else:
        count, nbytes = kids["n"][0][4:6] if kids["n"] else (0, 0)
        table = tensors_of(conn, cid, offset, limit) if tensors == "all" and count else []
    order = list(Role)
    return CommitDetail(
        id=CommitId(row.id),
        kind=Kind(row.kind),
        line=row.line,
        parents=[r[0] for r in sorted(kids["p"], key=lambda r: r[4])],
        message=row.message,
        author=row.author,
        created_at=iso(row.created_at),
        meta=row.meta or {},
        base=row.base,
        base_fingerprint=row.base_fingerprint,
        files={r[0]: FileEntry(r[1], int(r[4])) for r in sorted(kids["f"], key=lambda r: r[5])},
        tensors=table,
        peft=row.peft,
        config=row.config,
        provenance=row.provenance or {},
        tags=sorted(f"{r[0]}@{r[1]}" for r in kids["r"] if r[2] == RefKind.TAG),
        members=[
            Member(Role(r[0]), r[1], CommitId(r[2]), r[3])
            for r in sorted(kids["m"], key=lambda r: (order.index(Role(r[0])), r[1]))
        ],
        signatures=[r[0] for r in sorted(kids["g"], key=lambda r: r[5])],
        tensor_count=int(count),
        tensor_bytes=int(nbytes),
    )


def _children(conn: Connection, cid: str, *, totals: bool) -> dict[str, list[tuple]]:
    found: dict[str, list[tuple]] = {k: [] for k in "pfrmgn"}
    for letter, *rest in conn.execute(_children_query(totals), {"cid": cid}):
        found[letter].append(tuple(rest))
    return found


@functools.cache
def _children_query(totals: bool):
    """The rows of commit CID in its parents (p), files (f), refs (r), set members (m) and
    signatures (g), and with TOTALS its tensor index's count and bytes (n): one statement, a
    UNION ALL of one select per table, each row (a, b, c, d, n1, n2) under its table's letter.
    A statement each cost a round trip and SQLAlchemy's work per statement (issue 24). A
    table's order comes from the database (n1 or n2: its place), as its own query had it."""
    txt, big = sa.Text, sa.BigInteger
    none, zero = sa.cast(sa.null(), txt), sa.cast(sa.null(), big)

    def part(letter, a=none, b=none, c=none, d=none, n1=zero, n2=zero):
        cols = [sa.cast(x, txt) if x is not none else x for x in (a, b, c, d)]
        return sa.select(sa.literal_column(f"'{letter}'", txt), *cols, sa.cast(n1, big), n2)

    cid = sa.bindparam("cid", type_=sa.String)
    p, f, r = s.commit_parents.c, s.files.c, s.refs.c
    m, g, t = s.set_members.c, s.commit_signatures.c, s.tensors.c
    place = sa.func.row_number
    parts = [
        part("p", p.parent_id, n1=p.idx).where(p.commit_id == cid),
        part("f", f.path, f.blob_id, n1=f.size, n2=place().over(order_by=f.path)).where(
            f.commit_id == cid
        ),
        # by target alone, as tags_of reads them (its comment says why)
        part("r", r.line, r.name, r.kind).where(r.target == cid),
        part("m", m.role, m.label, m.member_id, m.requested).where(m.commit_id == cid),
        part("g", g.bundle, n2=place().over(order_by=(g.added_at, g.sha256))).where(
            g.commit_id == cid
        ),
    ]
    if totals:
        sums = sa.func.coalesce(sa.func.sum(t.nbytes), 0)
        totalled = part("n", n1=sa.func.count(), n2=sa.cast(sums, big))
        parts.append(totalled.where(t.commit_id == cid))
    return sa.union_all(*parts)


def signatures_of(conn: Connection, cid: str) -> list[str]:
    """The model-signing bundles commit CID carries, oldest first (mint.signing)."""
    c = s.commit_signatures.c
    q = sa.select(c.bundle).where(c.commit_id == cid).order_by(c.added_at, c.sha256)
    return [r.bundle for r in conn.execute(q)]


def delete_unreferenced(conn: Connection, cid: str) -> bool:
    """Remove commit CID's rows, unless anything but its own rows refers to it (a child, a
    set, a ref, an evaluation...). Only for taking back a commit that was just made."""
    own = {("commit_parents", "commit_id"), ("files", "commit_id"), ("tensors", "commit_id")}
    own.add(("commit_meta", "commit_id"))
    uses = [
        fk.parent
        for table in s.metadata.sorted_tables
        for fk in table.foreign_keys
        if fk.column.table is s.commits and (table.name, fk.parent.name) not in own
    ]
    if any(conn.execute(sa.select(sa.literal(1)).where(c == cid).limit(1)).first() for c in uses):
        return False
    for table in (s.tensors, s.files, s.commit_parents, s.commit_meta):
        conn.execute(table.delete().where(table.c.commit_id == cid))
    conn.execute(s.commits.delete().where(s.commits.c.id == cid))
    return True
