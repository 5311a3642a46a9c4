"""The porcelain: one function per user operation. The CLI and the server call these.

Functions take an open `Repo` and return frozen dataclasses; none of them prints.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import sqlalchemy as sa

from mint import bases as bases_mod
from mint import commits as cm
from mint import refs
from mint import schema as s
from mint.adapter import CONFIG, check_against_base, hash_adapter, safe_relpath, scan_adapter
from mint.errors import (
    DestinationNotEmpty,
    InvalidAdapter,
    RefExists,
    RevisionNotFound,
    UnknownBase,
    WrongKind,
)
from mint.objects import (
    Base,
    CheckoutResult,
    CommitDetail,
    CommitId,
    CommitInfo,
    CommitResult,
    Diff,
    FileEntry,
    LineInfo,
    RefInfo,
    TensorChange,
    TensorEntry,
    iso,
    utcnow,
)
from mint.repo import Repo, current_user
from mint.safetensors_index import read_tensor_float
from mint.store import copy_out

# --- bases -------------------------------------------------------------------


def base_add(repo: Repo, name: str, path: str | os.PathLike) -> Base:
    """Register a frozen base by its config.json. Re-adding the same config is a no-op."""
    refs.check_name("base", name)
    config = bases_mod.read_base_config(path)
    fp = bases_mod.fingerprint(config)
    with repo.db.write() as conn:
        row = conn.execute(sa.select(s.bases).where(s.bases.c.name == name)).first()
        if row is not None:
            if row.fingerprint != fp:
                raise RefExists(f"base {name} is already registered with another config (fingerprint {row.fingerprint[:12]})")
            return _base(row)
        conn.execute(
            s.bases.insert().values(name=name, fingerprint=fp, config=config, source=str(path), created_at=utcnow())
        )
        return _base(conn.execute(sa.select(s.bases).where(s.bases.c.name == name)).one())


def base_ls(repo: Repo) -> list[Base]:
    with repo.db.read() as conn:
        return [_base(r) for r in conn.execute(sa.select(s.bases).order_by(s.bases.c.name))]


def _base(row) -> Base:
    return Base(row.name, row.fingerprint, row.config, row.source, iso(row.created_at))


def find_base(conn, adapter_base: str | None, explicit: str | None):
    """The registered base an adapter is bound to: --base, else its base_model_name_or_path."""
    if explicit:
        row = conn.execute(sa.select(s.bases).where(s.bases.c.name == explicit)).first()
        if row is None:
            raise UnknownBase(f"base {explicit!r} is not registered")
        return row
    if not adapter_base:
        raise UnknownBase("the adapter names no base_model_name_or_path", hint="pass --base NAME")
    candidates = {adapter_base, Path(adapter_base.rstrip("/")).name}
    for row in conn.execute(sa.select(s.bases)):
        if row.name in candidates or row.source == adapter_base:
            return row
    raise UnknownBase(f"the adapter's base {adapter_base!r} is not a registered base")


# --- commits -----------------------------------------------------------------


def commit(
    repo: Repo,
    line: str,
    adapter_dir: str | os.PathLike,
    message: str,
    *,
    meta: dict | None = None,
    base: str | None = None,
    provenance: dict | None = None,
    author: str | None = None,
) -> CommitResult:
    """Record the PEFT adapter folder as a new commit on LINE (parent: LINE's head).

    Everything is checked before anything is written; blobs are durable before the
    transaction that refers to them; the head moves by compare-and-swap.
    """
    refs.check_name("line", line)
    scanned = scan_adapter(adapter_dir)
    with repo.db.read() as conn:
        base_row = find_base(conn, scanned.base_name, base)
        check_against_base(scanned.root, scanned.header, base_row.config, base_row.name)
        line_row = refs.line_row(conn, line)
        if line_row is not None and line_row.kind != "adapter":
            raise WrongKind(f"line {line} holds {line_row.kind} commits, not adapters")
        head = line_row.head if line_row is not None else None
        head_tree = cm.commit_row(conn, head).tree if head else None
    hashed = hash_adapter(scanned)
    now = utcnow()
    new = cm.NewCommit(
        kind="adapter", line=line, parents=[head] if head else [],
        files={f.path: FileEntry(hashed.blobs[f.path], f.size) for f in scanned.files},
        base=base_row.name, base_fingerprint=base_row.fingerprint, message=message,
        author=author or current_user(), created_at=now.isoformat(), meta=dict(meta or {}),
        provenance=dict(provenance or {}), peft=scanned.peft, config=scanned.config,
        tensors=[
            TensorEntry(t.name, t.dtype, list(t.shape), hashed.tensor_hashes[t.name], t.nbytes,
                        "adapter_model.safetensors", t.start)
            for t in scanned.header.tensors
        ],
    )  # fmt: skip
    if head_tree == new.tree:
        return CommitResult(CommitId(head), line, [], created=False)
    written = sum(
        repo.store.put(f.abspath, blob_id=hashed.blobs[f.path]).size
        for f in scanned.files
        if not repo.store.has(hashed.blobs[f.path])
    )
    return _record(repo, new, head, now, written)


def _record(repo: Repo, new: cm.NewCommit, head: str | None, now, written: int) -> CommitResult:
    """Insert the commit and move the line's head in one transaction."""
    with repo.db.write() as conn:
        cid = cm.insert_commit(conn, new, now)
        refs.advance_head(conn, new.line, new.kind, head, cid)
    return CommitResult(cid, new.line, new.parents, created=True, bytes_written=written)


def resolve(repo: Repo, rev: str) -> CommitId:
    with repo.db.read() as conn:
        return refs.resolve(conn, rev).id


def log(repo: Repo, rev: str | None = None, n: int | None = None) -> list[CommitInfo]:
    """Ancestors of REV newest first; without REV, every commit newest first."""
    with repo.db.read() as conn:
        if rev is not None:
            return cm.walk(conn, refs.resolve(conn, rev).id, n)
        q = sa.select(s.commits).order_by(s.commits.c.created_at.desc(), s.commits.c.id)
        return cm.infos(conn, conn.execute(q.limit(n) if n else q))


def show(repo: Repo, rev: str) -> CommitDetail:
    with repo.db.read() as conn:
        return cm.detail(conn, refs.resolve(conn, rev).id)


def ls(repo: Repo) -> list[LineInfo]:
    with repo.db.read() as conn:
        rows = conn.execute(sa.select(s.lines).order_by(s.lines.c.name))
        return [LineInfo(r.name, r.kind, r.head, r.commit_count) for r in rows]


# --- diff --------------------------------------------------------------------


def diff(repo: Repo, rev_a: str, rev_b: str) -> Diff:
    """Config keys, files and tensors that differ; changed tensors carry ‖B−A‖/‖A‖."""
    with repo.db.read() as conn:
        a = cm.detail(conn, refs.resolve(conn, rev_a).id)
        b = cm.detail(conn, refs.resolve(conn, rev_b).id)
    ca, cb = a.config or {}, b.config or {}
    config = {k: [ca.get(k), cb.get(k)] for k in sorted(set(ca) | set(cb)) if ca.get(k) != cb.get(k)}
    files = {
        p: [a.files[p].sha256 if p in a.files else None, b.files[p].sha256 if p in b.files else None]
        for p in sorted(set(a.files) | set(b.files))
        if a.files.get(p) != b.files.get(p)
    }
    ta, tb = {t.name: t for t in a.tensors}, {t.name: t for t in b.tensors}
    changed = [
        TensorChange(name, _rel_delta(repo, a, ta[name], b, tb[name]))
        for name in sorted(set(ta) & set(tb))
        if ta[name].sha256 != tb[name].sha256
    ]
    ma = {f"{m.role}:{m.label}": m.commit_id for m in a.members}
    mb = {f"{m.role}:{m.label}": m.commit_id for m in b.members}
    members = {k: [ma.get(k), mb.get(k)] for k in sorted(set(ma) | set(mb)) if ma.get(k) != mb.get(k)}
    return Diff(
        a.id, b.id, config, sorted(set(tb) - set(ta)), sorted(set(ta) - set(tb)), changed, files, members
    )


def _rel_delta(repo: Repo, a: CommitDetail, ta: TensorEntry, b: CommitDetail, tb: TensorEntry) -> float | None:
    if ta.shape != tb.shape:
        return None
    va = read_tensor_float(repo.store.local_path(a.files[ta.file].sha256), ta.offset, ta.nbytes, ta.dtype)
    vb = read_tensor_float(repo.store.local_path(b.files[tb.file].sha256), tb.offset, tb.nbytes, tb.dtype)
    if va is None or vb is None:
        return None
    import numpy as np

    norm = float(np.linalg.norm(va))
    return float(np.linalg.norm(vb - va)) / norm if norm > 0 else None


# --- tags --------------------------------------------------------------------


def _split_tag(tag: str, line: str) -> tuple[str, str]:
    if "@" in tag:
        tline, _, tname = tag.partition("@")
        if tline != line:
            raise WrongKind(f"{tag} names line {tline}, but the commit is on {line}")
        return tline, tname
    return line, tag


def tag(repo: Repo, tag_name: str, rev: str, *, message: str | None = None, force: bool = False) -> RefInfo:
    """Make LINE@TAG point at REV. Moving an existing tag needs force, and is logged."""
    by = current_user()
    with repo.db.write() as conn:
        target = refs.resolve(conn, rev).id
        line = cm.commit_row(conn, target).line
        line, name = _split_tag(tag_name, line)
        refs.check_name("tag", name)
        existing = refs.get_ref(conn, line, name)
        if existing is not None and existing.kind != "tag":
            raise RefExists(f"{line}@{name} is a channel; a tag may not share its name")
        if existing is not None and existing.target == target:
            return _ref(existing)
        if existing is not None and not force:
            raise RefExists(f"tag {line}@{name} already points at {existing.target[:12]}", hint="pass --force to move it")
        refs.set_ref(
            conn, line=line, name=name, kind="tag", expected=existing.target if existing else None,
            new=target, by=by, action="force" if existing else "create", message=message,
        )  # fmt: skip
        return _ref(refs.get_ref(conn, line, name))


def tag_list(repo: Repo, line: str | None = None, kind: str = "tag") -> list[RefInfo]:
    with repo.db.read() as conn:
        q = sa.select(s.refs).where(s.refs.c.kind == kind)
        if line:
            q = q.where(s.refs.c.line == line)
        return [_ref(r) for r in conn.execute(q.order_by(s.refs.c.line, s.refs.c.name))]


def tag_delete(repo: Repo, ref: str) -> RefInfo:
    line, _, name = ref.partition("@")
    if not line or not name:
        raise RevisionNotFound(ref, "expected LINE@TAG")
    with repo.db.write() as conn:
        row = refs.get_ref(conn, line, name)
        if row is None or row.kind != "tag":
            raise RevisionNotFound(ref, "no such tag")
        refs.delete_ref(conn, line=line, name=name, expected=row.target, by=current_user())
        return _ref(row)


def _ref(row) -> RefInfo:
    return RefInfo(row.line, row.name, row.kind, CommitId(row.target), row.message, iso(row.updated_at))


# --- checkout ----------------------------------------------------------------


def checkout(repo: Repo, rev: str, dest: str | os.PathLike) -> CheckoutResult:
    """Write REV's files, byte for byte, into DEST, which must be new or empty.

    A set checks out as mol.toml with commit ids, its prompts and a folder per member."""
    from mint import sets

    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise DestinationNotEmpty(f"{dest} exists and is not an empty folder")
    with repo.db.read() as conn:
        cid = refs.resolve(conn, rev).id
        if cm.commit_row(conn, cid).kind == "set":
            items = sets.checkout_plan(conn, cm.detail(conn, cid))
        else:  # only the file list: an adapter's tensor rows are not needed here
            items = [(p, f.sha256) for p, f in cm.files_of(conn, cid).items()]
    plan = [(safe_relpath(p), src) for p, src in items]
    sizes = [len(src) if isinstance(src, bytes) else repo.store.size(src) for _, src in plan]  # all blobs exist
    created = not dest.exists()
    try:
        dest.mkdir(parents=True, exist_ok=True)
        for path, src in plan:
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(src, bytes):
                target.write_bytes(src)
            else:
                copy_out(repo.store, src, target)
            os.chmod(target, 0o644)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True) if created else _empty(dest)
        raise
    return CheckoutResult(CommitId(cid), str(dest), len(plan), sum(sizes))


def _empty(folder: Path) -> None:
    for child in folder.iterdir():
        shutil.rmtree(child) if child.is_dir() else child.unlink()


def adapter_config(repo: Repo, cid: str) -> dict:
    with repo.db.read() as conn:
        row = cm.commit_row(conn, cid)
    if row.kind != "adapter":
        raise WrongKind(f"{cid[:12]} is a {row.kind} commit, not an adapter")
    if row.config is None:
        raise InvalidAdapter(cid, f"commit records no {CONFIG}")
    return row.config
