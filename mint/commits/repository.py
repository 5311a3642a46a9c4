"""Commits in a local repository: record one (the backend's write), read back, compare.

Making a commit, checking one out and exporting it are written once, over a local or remote
repository, in `mint.porcelain`; these are the local repository's side of them."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools

import sqlalchemy as sa

from mint import schema as s
from mint.commits import rows
from mint.errors import (
    BlobMissing,
    WrongKind,
)
from mint.faults import crash_point
from mint.ids import CommitId, Kind
from mint.objects import (
    CommitDetail,
    CommitInfo,
    CommitResult,
    Diff,
    LineInfo,
    TensorChange,
    TensorDiff,
    TensorEntry,
)
from mint.refs import RefsContainer, find_line, resolve
from mint.repo import Repo

GC_RACE_ATTEMPTS = 3


def line_head(conn, line: str, kind: Kind) -> tuple[str | None, str | None]:
    """(head, head's tree) of LINE, which must hold KIND commits if it exists."""
    row = find_line(conn, line)
    if row is None:
        return None, None
    if row.kind != kind:
        raise WrongKind(f"line {line} holds {row.kind} commits, not {kind}s")
    if row.head is None:  # made without a commit (the Hub's create_repo)
        return None, None
    return row.head, rows.commit_row(conn, row.head).tree


def record(
    repo: Repo, new: rows.NewCommit, head: str | None, store_blobs, also=None, advance=True
) -> CommitResult:
    """Store the blobs (STORE_BLOBS() returns the bytes written), then insert the commit and
    move the line's head in one transaction that finds every blob in place; ALSO(conn, id),
    if given, writes what goes with the commit in that transaction (its signatures, or the
    proposal that offers it to the line: then, without ADVANCE, no head moves) and returns how
    many signatures it kept."""
    written = store_blobs()
    crash_point("commit.after-blobs")
    for attempt in range(GC_RACE_ATTEMPTS):
        try:
            with repo.db.write() as conn:
                repo.db.guard_blobs(conn, exclusive=False)
                for f in new.files.values():
                    if not repo.store.has(f.sha256):
                        raise BlobMissing(f.sha256)
                cid = rows.insert_commit(conn, new, dt.datetime.fromisoformat(new.created_at))
                if advance:
                    RefsContainer(conn).advance_head(new.line, new.kind, head, cid)
                signed = (also(conn, cid) if also is not None else 0) or 0
                crash_point("commit.in-transaction")
            break
        except BlobMissing:  # a gc removed a reused blob before our rows could protect it
            if attempt == GC_RACE_ATTEMPTS - 1:
                raise
            written += store_blobs()
    crash_point("commit.after-transaction")
    return CommitResult(
        cid, new.line, new.parents, created=True, bytes_written=written, signed=signed
    )


def resolve_rev(repo: Repo, rev: str) -> CommitId:
    """The commit id REV names (any revision form)."""
    with repo.db.read(autocommit=True) as conn:
        return resolve(conn, rev).id


def log(
    repo: Repo,
    rev: str | None = None,
    n: int | None = None,
    *,
    since: str | dt.datetime | None = None,
    until: str | dt.datetime | None = None,
    author: str | None = None,
) -> list[CommitInfo]:
    """Ancestors of REV newest first; without REV, every commit newest first. At most N;
    only those made from SINCE to UNTIL (datetimes, or ISO 8601 text; UTC without a zone), by
    an author whose name holds AUTHOR (any case). Each with the names that point at it."""
    from mint.commits import log as history

    narrow = history.narrowing(since, until, author)
    with repo.db.read(autocommit=True) as conn:
        if rev is not None:
            return history.walk(conn, resolve(conn, rev).id, n, narrow)
        return history.newest(conn, n, narrow)


def show(
    repo: Repo, rev: str, tensors: str = "all", offset: int = 0, limit: int | None = None
) -> CommitDetail:
    """Everything recorded for one commit, with the dataset its `data` meta names, if known.
    TENSORS "all" gives its tensor table (a page of it: from OFFSET, at most LIMIT rows),
    "summary" only the table's count and bytes (`tensor_count`, `tensor_bytes`)."""
    with repo.db.read(autocommit=True) as conn:
        detail = rows.detail(conn, resolve(conn, rev).id, tensors, offset, limit)
        data = detail.meta.get("data")
        if isinstance(data, str) and data:
            from mint.traces.export import known_dataset  # `mint log` does not load it

            detail = dataclasses.replace(detail, dataset=known_dataset(conn, data))
        return detail


def pulled(repo: Repo, repo_id: str, sha: str, path: str | None = None) -> CommitInfo | None:
    """The commit that holds hub commit SHA of REPO_ID (a set's member: its folder PATH), the
    oldest if several do, or None.

    One indexed lookup on `commits.source_sha`; the repo and folder are checked on the few
    rows that share the sha.
    """
    c = s.commits.c
    q = sa.select(s.commits).where(c.source_sha == sha).order_by(c.created_at, c.id)
    with repo.db.read() as conn:
        for row in conn.execute(q):
            prov = row.provenance or {}
            if (prov.get("source"), prov.get("repo"), prov.get("path")) == ("hf", repo_id, path):
                return rows.infos(conn, [row])[0]
    return None


def ls(repo: Repo, *, limit: int | None = None, after: str | None = None) -> list[LineInfo]:
    """Every line by name with its kind, head and number of commits; with LIMIT and AFTER (a
    line name), one page: the first LIMIT lines whose names sort after AFTER."""
    page = rows.page_of_lines(limit, after)
    with repo.db.read(autocommit=True) as conn:
        found = conn.execute(_ls_query(limit is not None, after is not None), page).all()
    kinds = {k.value: k for k in Kind}
    return [LineInfo(name, kinds[kind], head, n) for name, kind, head, n in found]


@functools.cache
def _ls_query(paged: bool, after: bool):
    """`ls`'s statement for a shape of page, built once: building it for each call cost more
    than reading a page of 50 lines (issue 24)."""
    ln = s.lines.c
    return rows.lines_page(
        sa.select(ln.name, ln.kind, ln.head, ln.commit_count), paged=paged, after=after
    )


# --- diff --------------------------------------------------------------------


def diff(repo: Repo, rev_a: str, rev_b: str) -> Diff:
    """Config keys, files and tensors that differ; changed tensors carry ‖B−A‖/‖A‖."""
    with repo.db.read() as conn:
        a = rows.detail(conn, resolve(conn, rev_a).id)
        b = rows.detail(conn, resolve(conn, rev_b).id)
    ta, tb = {t.name: t for t in a.tensors}, {t.name: t for t in b.tensors}
    changed = [
        _change(repo, a, ta[name], b, tb[name])
        for name in sorted(set(ta) & set(tb))
        if ta[name].sha256 != tb[name].sha256
    ]
    ma = {f"{m.role}:{m.label}": m.commit_id for m in a.members}
    mb = {f"{m.role}:{m.label}": m.commit_id for m in b.members}
    files_a = {p: f.sha256 for p, f in a.files.items()}
    files_b = {p: f.sha256 for p, f in b.files.items()}
    tensors = TensorDiff(sorted(set(tb) - set(ta)), sorted(set(ta) - set(tb)), changed)
    config = _changed(a.config or {}, b.config or {})
    return Diff(a.id, b.id, config, tensors, _changed(files_a, files_b), _changed(ma, mb))


def _changed(a: dict, b: dict) -> dict[str, list]:
    """key -> [value in A, value in B] for every key whose value differs (None: absent)."""
    return {k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def _change(repo: Repo, a: CommitDetail, ta: TensorEntry, b: CommitDetail, tb: TensorEntry):
    """How tensor TA of A became TB of B: its relative change, or its two shapes."""
    if list(ta.shape) != list(tb.shape):
        return TensorChange(ta.name, None, list(ta.shape), list(tb.shape))
    return TensorChange(ta.name, _rel_delta(repo, a, ta, b, tb))


def _rel_delta(repo: Repo, a: CommitDetail, ta: TensorEntry, b: CommitDetail, tb: TensorEntry):
    va = _tensor(repo, a, ta)
    vb = _tensor(repo, b, tb)
    if va is None or vb is None:
        return None
    import numpy as np

    norm = float(np.linalg.norm(va))
    return float(np.linalg.norm(vb - va)) / norm if norm > 0 else None


def _tensor(repo: Repo, commit: CommitDetail, t: TensorEntry):
    blob = commit.files[t.file].sha256
    repo.store.verify(blob)  # never compute from bytes that are not the committed ones
    from mint.commits.safetensors import read_tensor_float

    return read_tensor_float(repo.store.local_path(blob), t.offset, t.nbytes, t.dtype)
