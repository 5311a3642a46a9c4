"""Set commits: a set pins the router and every expert to exact adapter commits, and stores
the prompts as blobs. Serving a set commit is then reproducible."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from mint.bases import get_base
from mint.commits import rows
from mint.commits.adapter import WEIGHTS, safe_relpath
from mint.commits.operations import line_head, record
from mint.errors import BaseMismatch, InvalidConfig, WrongKind
from mint.ids import Kind, Role, utcnow
from mint.objects import AdapterFiles, CommitResult, FileEntry, Member, SetSpec
from mint.refs import check_text, resolve
from mint.repo import Repo
from mint.sets.mol import MOL, MolFile, parse_mol


def set_commit(
    repo: Repo,
    path: str | os.PathLike,
    message: str,
    *,
    author: str,
    provenance: dict | None = None,
) -> CommitResult:
    """Resolve every member to a commit id, store the prompts, and record a set commit."""
    check_text("message", message)
    mol = parse_mol(path)
    prompts = {p: read_prompt(mol.folder, p) for p in (mol.route_prompt, mol.summary_prompt)}
    with repo.db.read() as conn:
        base = get_base(conn, mol.base)
        members = [pin_member(conn, role, label, ref, base) for role, label, ref in roles(mol)]
        head, head_tree = line_head(conn, mol.name, Kind.SET)
    now = utcnow()
    new = rows.NewCommit(
        kind=Kind.SET,
        line=mol.name,
        parents=[head] if head else [],
        files={p: FileEntry(hashlib.sha256(d).hexdigest(), len(d)) for p, d in prompts.items()},
        base=base.name,
        base_fingerprint=base.fingerprint,
        message=message,
        author=author,
        created_at=now.isoformat(),
        meta={},
        provenance=dict(provenance or {}),
        config=pinned_config(mol, members),
        members=members,
    )
    if head_tree == new.tree:
        return CommitResult(head, mol.name, [], created=False)

    def store_prompts() -> int:
        return sum(len(d) for d in prompts.values() if repo.store.put_bytes(d).written)

    return record(repo, new, head, store_prompts)


def roles(mol: MolFile):
    """(role, label, ref as written) for the router, each expert and the summary adapter."""
    yield Role.ROUTER, "router", mol.router
    for label, ref in mol.experts.items():
        yield Role.EXPERT, label, ref
    yield Role.SUMMARY, "summary", mol.summary


def read_prompt(folder: Path, rel: str) -> bytes:
    """A prompt's bytes: a regular file inside FOLDER (no link on the way), UTF-8 text."""
    safe_relpath(rel)
    path = folder
    for part in rel.split("/"):
        path = path / part
        if path.is_symlink():
            raise InvalidConfig(
                f"prompt {rel} is a symbolic link; a set stores regular files only"
            )
    try:
        data = path.read_bytes()
    except OSError:
        raise InvalidConfig(
            f"prompt file {rel} is missing beside {MOL} (looked in {folder})"
        ) from None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidConfig(f"prompt {rel} is not UTF-8 text") from None
    return data


def pin_member(conn, role: Role, label: str, ref: str, base) -> Member:
    """ROLE LABEL = REF resolved to an adapter commit on the set's BASE."""
    cid = resolve(conn, ref).id
    row = rows.commit_row(conn, cid)
    if row.kind != Kind.ADAPTER:
        raise WrongKind(f"{role} {label} = {ref!r} is a {row.kind} commit, not an adapter")
    if row.base_fingerprint != base.fingerprint:
        raise BaseMismatch(
            f"{role} {label} = {ref!r} is bound to base {row.base} ({row.base_fingerprint[:12]}), "
            f"but the set's base is {base.name} ({base.fingerprint[:12]})"
        )
    return Member(role, label, cid, ref)


def pinned_config(mol: MolFile, members: list[Member]) -> dict:
    """The set's configuration with every adapter as an exact commit id."""
    by = {(m.role, m.label): m.commit_id for m in members}
    return {
        "name": mol.name,
        "protocol": mol.protocol,
        "base": mol.base,
        "router": {
            "adapter": by[Role.ROUTER, "router"],
            "labels": mol.labels,
            "prompt": mol.route_prompt,
            "default": mol.default,
        },
        "experts": {label: by[Role.EXPERT, label] for label in mol.labels},
        "summary": {"adapter": by[Role.SUMMARY, "summary"], "prompt": mol.summary_prompt},
    }


# --- reading a set back ----------------------------------------------------------


def set_spec(repo: Repo, rev: str) -> SetSpec:
    """A set commit resolved for serving: member configs, where their weights lie, and the
    prompts, every blob verified against its id."""
    with repo.db.read() as conn:
        detail = rows.detail(conn, resolve(conn, rev).id)
        if detail.kind != Kind.SET:
            raise WrongKind(f"{rev} is an {detail.kind} commit, not a set")
        adapters = {m.commit_id: _adapter_files(repo, conn, m.commit_id) for m in detail.members}
    cfg = detail.config
    return SetSpec(
        id=detail.id,
        name=detail.line,
        base=detail.base,
        base_fingerprint=detail.base_fingerprint,
        protocol=cfg["protocol"],
        labels=cfg["router"]["labels"],
        default=cfg["router"]["default"],
        router=adapters[cfg["router"]["adapter"]],
        experts={label: adapters[c] for label, c in cfg["experts"].items()},
        summary=adapters[cfg["summary"]["adapter"]],
        route_prompt=_prompt(repo, detail, cfg["router"]["prompt"]),
        summary_prompt=_prompt(repo, detail, cfg["summary"]["prompt"]),
        blobs=sorted(
            {f.sha256 for f in detail.files.values()}
            | {b for a in adapters.values() for b in a.blobs}
        ),
    )


def _prompt(repo: Repo, detail, rel: str) -> str:
    blob = detail.files[rel].sha256
    repo.store.verify(blob)
    try:
        return repo.store.local_path(blob).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidConfig(f"prompt {rel} of set {detail.id[:12]} is not UTF-8 text") from None


def _adapter_files(repo: Repo, conn, cid: str) -> AdapterFiles:
    row = rows.commit_row(conn, cid)
    files = rows.files_of(conn, cid)
    weights = str(repo.store.local_path(files[WEIGHTS].sha256))
    return AdapterFiles(cid, row.config, weights, sorted(f.sha256 for f in files.values()))
