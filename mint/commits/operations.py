"""Adapter commits: record, read back, compare and check out."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
from pathlib import Path

import sqlalchemy as sa

from mint import schema as s
from mint.bases import find_base
from mint.commits import rows
from mint.commits.adapter import (
    CONFIG,
    WEIGHTS,
    check_against_base,
    scan_adapter,
    walk_adapter,
)
from mint.commits.files import write_files
from mint.commits.ingest import from_cache, ingest, known_files
from mint.commits.safetensors import read_tensor_float
from mint.commits.statcache import StatCache
from mint.errors import (
    BlobMissing,
    DestinationNotEmpty,
    InvalidAdapter,
    MintError,
    WrongKind,
)
from mint.faults import crash_point
from mint.ids import CommitId, Kind, utcnow
from mint.objects import (
    CheckoutResult,
    CommitDetail,
    CommitInfo,
    CommitResult,
    Diff,
    FileEntry,
    LineInfo,
    TensorChange,
    TensorDiff,
    TensorEntry,
)
from mint.refs import RefsContainer, check_name, check_text, find_line, resolve
from mint.repo import Repo
from mint.sets.layout import set_layout
from mint.traces.export import known_dataset

GC_RACE_ATTEMPTS = 3


def commit(
    repo: Repo,
    line: str,
    adapter_dir: str | os.PathLike,
    message: str,
    *,
    author: str,
    meta: dict | None = None,
    base: str | None = None,
    provenance: dict | None = None,
) -> CommitResult:
    """Record the PEFT adapter folder as a new commit on LINE (parent: LINE's head).

    Everything is checked before anything is published; each byte is read once, in the pass
    that copies it into the store, and not at all when the stat cache knows the file; blobs
    are durable before the transaction that refers to them; the head moves by compare-and-swap.
    """
    check_inputs(line, message, meta)
    cache = StatCache.in_folder(repo.mint_dir)
    try:
        same = _same_as_head(repo, cache, adapter_dir, line, base)
        if same is not None:
            return same
        scanned = scan_adapter(adapter_dir, cache=cache)
        with repo.db.read() as conn:
            base_row = find_base(conn, scanned.base_name, base)
            check_against_base(scanned.root, scanned.header, base_row.config, base_row.name)
            head, head_tree = line_head(conn, line, Kind.ADAPTER)
        known = known_files(scanned, cache)
        hashed, written = from_cache(scanned, known), None
        if hashed is None:  # read what the cache does not know, storing it on the way
            hashed, written = ingest(scanned, repo.store, cache, known)
    finally:
        cache.close()
    fields = dict(meta=meta, provenance=provenance, author=author, message=message)
    new = _new_commit(line, head, hashed, base_row, **fields)
    if head_tree == new.tree:
        return CommitResult(CommitId(head), line, [], created=False)
    return record(repo, new, head, _blob_storer(repo, hashed, written))


def _same_as_head(repo: Repo, cache: StatCache, folder, line: str, base) -> CommitResult | None:
    """Nothing to commit, from the stat cache alone: every file known, and with the base they
    make the tree of LINE's head. Nothing is read, and nothing checked: nothing will be written,
    and these bytes were checked when they were committed. None: take the long way (which also
    raises whatever error this way met)."""
    try:
        _, files, _ = walk_adapter(folder)
    except MintError:
        return None
    known = {f.path: cache.get(f.abspath, f.stat) for f in files}
    if None in known.values() or known[CONFIG].head is None:
        return None
    try:
        config = json.loads(known[CONFIG].head)
        named = config.get("base_model_name_or_path")
        with repo.db.read() as conn:
            base_row = find_base(conn, named if isinstance(named, str) else None, base)
            head, head_tree = line_head(conn, line, Kind.ADAPTER)
    except (MintError, ValueError, AttributeError):
        return None
    entries = {f.path: FileEntry(known[f.path].blob, f.size) for f in files}
    if head is None or rows.tree_of(entries, base_row.fingerprint) != head_tree:
        return None
    return CommitResult(CommitId(head), line, [], created=False)


def _new_commit(line, head, hashed, base_row, *, meta, provenance, author, message):
    scanned = hashed.scanned
    return rows.NewCommit(
        kind=Kind.ADAPTER,
        line=line,
        parents=[head] if head else [],
        files={f.path: FileEntry(hashed.blobs[f.path], f.size) for f in scanned.files},
        base=base_row.name,
        base_fingerprint=base_row.fingerprint,
        message=message,
        author=author,
        created_at=utcnow().isoformat(),
        meta=dict(meta or {}),
        provenance=dict(provenance or {}),
        peft=scanned.peft,
        config=scanned.config,
        tensors=_tensor_entries(scanned, hashed),
    )


def _blob_storer(repo: Repo, hashed, written: int | None):
    """What `record` calls to store the blobs: the first time, nothing if the pass already
    stored them; otherwise every blob goes through put: one already stored is made young
    again for gc's grace period (a corrupt one replaced), a missing one copied and checked
    against the id it is recorded under (BlobChanged if the file no longer hashes to it)."""
    done = [written] if written is not None else []

    def store_blobs() -> int:
        if done:
            return done.pop()
        files = hashed.scanned.files
        puts = [repo.store.put(f.abspath, blob_id=hashed.blobs[f.path]) for f in files]
        return sum(p.size for p in puts if p.written)

    return store_blobs


def check_inputs(line: str, message: str, meta: dict | None = None) -> None:
    """The line's name, and the free text a commit stores."""
    check_name("line", line)
    check_text("message", message)
    for key, value in (meta or {}).items():
        check_text("metadata", f"{key}={value}")


def _tensor_entries(scanned, hashed) -> list[TensorEntry]:
    return [
        TensorEntry(
            t.name,
            t.dtype,
            list(t.shape),
            hashed.tensor_hashes[t.name],
            t.nbytes,
            WEIGHTS,
            t.start,
        )
        for t in scanned.header.tensors
    ]


def line_head(conn, line: str, kind: Kind) -> tuple[str | None, str | None]:
    """(head, head's tree) of LINE, which must hold KIND commits if it exists."""
    row = find_line(conn, line)
    if row is None:
        return None, None
    if row.kind != kind:
        raise WrongKind(f"line {line} holds {row.kind} commits, not {kind}s")
    return row.head, rows.commit_row(conn, row.head).tree


def record(repo: Repo, new: rows.NewCommit, head: str | None, store_blobs) -> CommitResult:
    """Store the blobs (STORE_BLOBS() returns the bytes written), then insert the commit and
    move the line's head in one transaction that finds every blob in place."""
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
                RefsContainer(conn).advance_head(new.line, new.kind, head, cid)
                crash_point("commit.in-transaction")
            break
        except BlobMissing:  # a gc removed a reused blob before our rows could protect it
            if attempt == GC_RACE_ATTEMPTS - 1:
                raise
            written += store_blobs()
    crash_point("commit.after-transaction")
    return CommitResult(cid, new.line, new.parents, created=True, bytes_written=written)


def resolve_rev(repo: Repo, rev: str) -> CommitId:
    """The commit id REV names (any revision form)."""
    with repo.db.read() as conn:
        return resolve(conn, rev).id


def log(repo: Repo, rev: str | None = None, n: int | None = None) -> list[CommitInfo]:
    """Ancestors of REV newest first; without REV, every commit newest first."""
    with repo.db.read() as conn:
        if rev is not None:
            return rows.walk(conn, resolve(conn, rev).id, n)
        q = sa.select(s.commits).order_by(s.commits.c.created_at.desc(), s.commits.c.id)
        return rows.infos(conn, conn.execute(q.limit(n) if n else q))


def show(repo: Repo, rev: str) -> CommitDetail:
    """Everything recorded for one commit, with the dataset its `data` meta names, if known."""
    with repo.db.read() as conn:
        detail = rows.detail(conn, resolve(conn, rev).id)
        data = detail.meta.get("data")
        if isinstance(data, str) and data:
            detail = dataclasses.replace(detail, dataset=known_dataset(conn, data))
        return detail


def ls(repo: Repo, *, limit: int | None = None, after: str | None = None) -> list[LineInfo]:
    """Every line by name with its kind, head and number of commits; with LIMIT and AFTER (a
    line name), one page: the first LIMIT lines whose names sort after AFTER."""
    ln = s.lines.c
    q = rows.lines_page(sa.select(ln.name, ln.kind, ln.head, ln.commit_count), limit, after)
    with repo.db.read() as conn:
        found = conn.execute(q).all()
    kinds = {k.value: k for k in Kind}
    return [LineInfo(name, kinds[kind], head, n) for name, kind, head, n in found]


# --- diff --------------------------------------------------------------------


def diff(repo: Repo, rev_a: str, rev_b: str) -> Diff:
    """Config keys, files and tensors that differ; changed tensors carry ‖B−A‖/‖A‖."""
    with repo.db.read() as conn:
        a = rows.detail(conn, resolve(conn, rev_a).id)
        b = rows.detail(conn, resolve(conn, rev_b).id)
    ta, tb = {t.name: t for t in a.tensors}, {t.name: t for t in b.tensors}
    changed = [
        TensorChange(name, _rel_delta(repo, a, ta[name], b, tb[name]))
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


def _rel_delta(repo: Repo, a: CommitDetail, ta: TensorEntry, b: CommitDetail, tb: TensorEntry):
    if ta.shape != tb.shape:
        return None
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
    return read_tensor_float(repo.store.local_path(blob), t.offset, t.nbytes, t.dtype)


# --- checkout ----------------------------------------------------------------


def checkout(repo: Repo, rev: str, dest: str | os.PathLike) -> CheckoutResult:
    """Write REV's files, byte for byte, into DEST, which must be new or empty.

    A set checks out as mol.toml with commit ids, its prompts and a folder per member."""
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise DestinationNotEmpty(str(dest))
    with repo.db.read() as conn:
        cid = resolve(conn, rev).id
        items = checkout_items(conn, cid)
    files, size = write_files(repo.store, items, dest)
    return CheckoutResult(CommitId(cid), str(dest), files, size)


def checkout_items(conn, cid: str) -> list[tuple[str, str | bytes]]:
    """(path, blob id or bytes) of every file a checkout of CID writes."""
    if rows.commit_row(conn, cid).kind == Kind.SET:
        return set_layout(conn, rows.detail(conn, cid))
    # only the file list: an adapter's tensor rows are not needed here
    return [(p, f.sha256) for p, f in rows.files_of(conn, cid).items()]


def adapter_config(repo: Repo, cid: str) -> dict:
    """The adapter_config.json recorded with adapter commit CID."""
    with repo.db.read() as conn:
        row = rows.commit_row(conn, cid)
    if row.kind != Kind.ADAPTER:
        raise WrongKind(f"{cid[:12]} is a {row.kind} commit, not an adapter")
    if row.config is None:
        raise InvalidAdapter(cid, f"commit records no {CONFIG}")
    return row.config
