"""Commits made against a registry: checked and hashed here, then the blobs the registry lacks,
the commit object (whose id it recomputes), and the line head by compare-and-swap.

The commit's author is the token's identity, as the registry knows it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from mint.bases import fingerprint, read_base_config
from mint.commits.adapter import check_against_base, hash_adapter, scan_adapter
from mint.commits.operations import _tensor_entries, check_inputs
from mint.commits.rows import NewCommit
from mint.errors import BaseMismatch, UnknownBase, WrongKind
from mint.ids import Kind, Role, utcnow
from mint.objects import Base, CommitResult, FileEntry, Member
from mint.refs.revisions import check_name, check_text
from mint.remote import reads as ops
from mint.remote.blobs import upload
from mint.remote.http import segment
from mint.remote.repo import RemoteRepo
from mint.remote.wire import commit_wire, tree_of


def commit(
    repo: RemoteRepo,
    line: str,
    adapter_dir: str | os.PathLike,
    message: str,
    *,
    author: str,
    meta: dict | None = None,
    base: str | None = None,
    provenance: dict | None = None,
) -> CommitResult:
    """Record the PEFT adapter folder as a new commit on LINE of the registry.

    Everything is checked here before a byte is sent; only the blobs the registry lacks go."""
    check_inputs(line, message, meta)
    scanned = scan_adapter(adapter_dir)
    found = find_base(ops.base_ls(repo), scanned.base_name, base)
    check_against_base(scanned.root, scanned.header, found.config, found.name)
    head, head_tree = line_head(repo, line, Kind.ADAPTER)
    hashed = hash_adapter(scanned)
    new = NewCommit(
        kind=Kind.ADAPTER,
        line=line,
        parents=[head] if head else [],
        files={f.path: FileEntry(hashed.blobs[f.path], f.size) for f in scanned.files},
        base=found.name,
        base_fingerprint=found.fingerprint,
        message=message,
        author=repo.whoami()["name"],
        created_at=utcnow().isoformat(),
        meta=dict(meta or {}),
        provenance=dict(provenance or {}),
        peft=scanned.peft,
        config=scanned.config,
        tensors=_tensor_entries(scanned, hashed),
    )
    if head_tree == new.tree:
        return CommitResult(head, line, [], created=False)
    sources = {hashed.blobs[f.path]: (f.abspath, f.size) for f in scanned.files}
    return record(repo, new, head, sources)


def record(repo: RemoteRepo, new: NewCommit, head: str | None, sources) -> CommitResult:
    """Send the blobs the registry lacks, then the commit, then move the head from HEAD."""
    sent = upload(repo.client, sources)
    repo.client.post("/objects", {"bases": [], "commits": [commit_wire(new)], "evaluations": []})
    repo.client.post(f"/lines/{segment(new.line)}/head", {"old": head, "new": new.id})
    return CommitResult(new.id, new.line, new.parents, created=True, bytes_written=sent.bytes)


def line_head(repo: RemoteRepo, line: str, kind: Kind) -> tuple[str | None, str | None]:
    """(head, head's tree) of LINE on the registry, which must hold KIND commits."""
    found = [i for i in ops.ls(repo) if i.name == line]
    if not found or found[0].head is None:
        return None, None
    if found[0].kind != kind:
        raise WrongKind(f"line {line} holds {found[0].kind} commits, not {kind}s")
    return found[0].head, tree_of(ops.show(repo, found[0].head))


def find_base(bases: list[Base], adapter_base: str | None, explicit: str | None) -> Base:
    """The registry's base an adapter is bound to (the rules of mint.bases.find_base)."""
    if explicit:
        return _named(bases, explicit)
    if not adapter_base:
        raise UnknownBase(None)
    candidates = {adapter_base, Path(adapter_base.rstrip("/")).name}
    for b in bases:
        if b.name in candidates or b.source == adapter_base:
            return b
    why = f"the adapter's base {adapter_base!r} is not a base the registry knows"
    raise UnknownBase(adapter_base, why)


def _named(bases: list[Base], name: str) -> Base:
    for b in bases:
        if b.name == name:
            return b
    raise UnknownBase(name, f"base {name!r} is not registered on the registry")


def base_add(repo: RemoteRepo, name: str, path: str | os.PathLike) -> Base:
    """Register a frozen base on the registry by its config.json (sent as a base object)."""
    check_name("base", name)
    config = read_base_config(path)
    wire = {"name": name, "fingerprint": fingerprint(config), "config": config}
    repo.client.post("/objects", {"bases": [wire], "commits": [], "evaluations": []})
    return _named(ops.base_ls(repo), name)


# --- sets ----------------------------------------------------------------------------------


def set_commit(
    repo: RemoteRepo,
    path: str | os.PathLike,
    message: str,
    *,
    author: str,
    provenance: dict | None = None,
) -> CommitResult:
    """Pin every member of mol.toml to a commit of the registry and record a set commit."""
    from mint.sets.mol import parse_mol
    from mint.sets.operations import pinned_config, read_prompt, roles

    check_text("message", message)
    mol = parse_mol(path)
    prompts = {p: read_prompt(mol.folder, p) for p in (mol.route_prompt, mol.summary_prompt)}
    base = _named(ops.base_ls(repo), mol.base)
    members = [_member(repo, role, label, ref, base) for role, label, ref in roles(mol)]
    head, head_tree = line_head(repo, mol.name, Kind.SET)
    new = NewCommit(
        kind=Kind.SET,
        line=mol.name,
        parents=[head] if head else [],
        files={p: FileEntry(hashlib.sha256(d).hexdigest(), len(d)) for p, d in prompts.items()},
        base=base.name,
        base_fingerprint=base.fingerprint,
        message=message,
        author=repo.whoami()["name"],
        created_at=utcnow().isoformat(),
        meta={},
        provenance=dict(provenance or {}),
        config=pinned_config(mol, members),
        members=members,
    )
    if head_tree == new.tree:
        return CommitResult(head, mol.name, [], created=False)
    with tempfile.TemporaryDirectory(prefix="mint-set-") as tmp:
        sources = {}
        for i, data in enumerate(prompts.values()):
            part = Path(tmp) / str(i)
            part.write_bytes(data)
            sources[hashlib.sha256(data).hexdigest()] = (part, len(data))
        return record(repo, new, head, sources)


def _member(repo: RemoteRepo, role: Role, label: str, ref: str, base: Base) -> Member:
    d = ops.show(repo, ref)
    if d.kind != Kind.ADAPTER:
        raise WrongKind(f"{role} {label} = {ref!r} is a {d.kind} commit, not an adapter")
    if d.base_fingerprint != base.fingerprint:
        raise BaseMismatch(
            f"{role} {label} = {ref!r} is bound to base {d.base} ({d.base_fingerprint[:12]}), "
            f"but the set's base is {base.name} ({base.fingerprint[:12]})"
        )
    return Member(role, label, d.id, ref)
