"""MoL configurations (`mol.toml`): a set commit pins the router and every expert to exact
adapter commits, and stores the prompts as blobs. Serving a set commit is reproducible."""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from mint import commits as cm
from mint import refs
from mint.adapter import WEIGHTS, safe_relpath
from mint.errors import BaseMismatch, InvalidConfig, UnknownBase, WrongKind
from mint.objects import AdapterFiles, CommitResult, FileEntry, Member, SetSpec, utcnow
from mint.repo import Repo, current_user

PROTOCOL = "mol/1"
MOL = "mol.toml"
# mol/1: the router's assistant turn starts with this prefill, and a label's tokens follow it.
PREFILL = "model_id="


@dataclass(frozen=True)
class MolFile:
    """A parsed mol.toml: adapter refs as written, prompt paths relative to its folder."""

    name: str
    protocol: str
    base: str
    router: str
    labels: list[str]
    route_prompt: str
    default: str
    experts: dict[str, str]
    summary: str
    summary_prompt: str
    folder: Path


def parse_mol(path: str | os.PathLike) -> MolFile:
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidConfig(f"cannot read {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidConfig(f"{path} is not valid TOML: {exc}") from None
    bad = lambda why: InvalidConfig(f"{path}: {why}")  # noqa: E731
    router, experts, summary = (raw.get(k) for k in ("router", "experts", "summary"))
    if not all(isinstance(t, dict) for t in (router, experts, summary)):
        raise bad("needs [router], [experts] and [summary] tables")
    for key, table, field in (("name", raw, "name"), ("base", raw, "base"), ("router.adapter", router, "adapter"),
                              ("router.prompt", router, "prompt"), ("summary.adapter", summary, "adapter"),
                              ("summary.prompt", summary, "prompt")):  # fmt: skip
        if not isinstance(table.get(field), str) or not table[field]:
            raise bad(f"{key} must be a non-empty string")
    protocol = raw.get("protocol", PROTOCOL)
    if protocol != PROTOCOL:
        raise bad(f"protocol {protocol!r} is not supported (mint speaks {PROTOCOL})")
    labels = router.get("labels")
    if not (isinstance(labels, list) and labels and all(isinstance(l, str) for l in labels)):
        raise bad("router.labels must be a non-empty list of strings")
    if len(set(labels)) != len(labels):
        raise bad("router.labels has duplicates")
    for label in labels:
        refs.check_name("label", label)
    missing = [l for l in labels if l not in experts]
    if missing:
        raise bad(f"label {missing[0]!r} has no expert in [experts]")
    extra = [e for e in experts if e not in labels]
    if extra:
        raise bad(f"expert {extra[0]!r} is not one of router.labels")
    default = router.get("default", labels[0])
    if default not in labels:
        raise bad(f"router.default {default!r} is not one of the labels")
    refs.check_name("set", raw["name"])
    return MolFile(raw["name"], protocol, raw["base"], router["adapter"], list(labels), router["prompt"],
                   default, {l: experts[l] for l in labels}, summary["adapter"], summary["prompt"],
                   path.parent)  # fmt: skip


def set_commit(
    repo: Repo, path: str | os.PathLike, message: str, *, provenance: dict | None = None,
    author: str | None = None,
) -> CommitResult:  # fmt: skip
    """Resolve every member to a commit id, store the prompts, and record a set commit."""
    mol = parse_mol(path)
    prompts = {p: _read_prompt(mol.folder, p) for p in (mol.route_prompt, mol.summary_prompt)}
    with repo.db.read() as conn:
        base = _base_row(conn, mol.base)
        members = [_member(conn, role, label, ref, base) for role, label, ref in _roles(mol)]
        line = refs.line_row(conn, mol.name)
        if line is not None and line.kind != "set":
            raise WrongKind(f"line {mol.name} holds {line.kind} commits, not sets")
        head = line.head if line is not None else None
        head_tree = cm.commit_row(conn, head).tree if head else None
    now = utcnow()
    config = _pinned(mol, members)
    new = cm.NewCommit(
        kind="set", line=mol.name, parents=[head] if head else [],
        files={p: FileEntry(_sha(data), len(data)) for p, data in prompts.items()},
        base=base.name, base_fingerprint=base.fingerprint, message=message,
        author=author or current_user(), created_at=now.isoformat(), meta={},
        provenance=dict(provenance or {}), config=config, members=members,
    )  # fmt: skip
    if head_tree == new.tree:
        return CommitResult(head, mol.name, [], created=False)
    written = sum(len(d) for d in prompts.values() if repo.store.put_bytes(d).written)
    with repo.db.write() as conn:
        cid = cm.insert_commit(conn, new, now)
        refs.advance_head(conn, new.line, "set", head, cid)
    return CommitResult(cid, new.line, new.parents, created=True, bytes_written=written)


def _roles(mol: MolFile):
    yield "router", "router", mol.router
    for label, ref in mol.experts.items():
        yield "expert", label, ref
    yield "summary", "summary", mol.summary


def _read_prompt(folder: Path, rel: str) -> bytes:
    safe_relpath(rel)
    try:
        return (folder / rel).read_bytes()
    except OSError:
        raise InvalidConfig(f"prompt file {rel} is missing beside {MOL} (looked in {folder})") from None


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _base_row(conn, name: str):
    import sqlalchemy as sa

    from mint import schema as s

    row = conn.execute(sa.select(s.bases).where(s.bases.c.name == name)).first()
    if row is None:
        raise UnknownBase(f"the set's base {name!r} is not registered")
    return row


def _member(conn, role: str, label: str, ref: str, base) -> Member:
    cid = refs.resolve(conn, ref).id
    row = cm.commit_row(conn, cid)
    if row.kind != "adapter":
        raise WrongKind(f"{role} {label} = {ref!r} is a {row.kind} commit, not an adapter")
    if row.base_fingerprint != base.fingerprint:
        raise BaseMismatch(
            f"{role} {label} = {ref!r} is bound to base {row.base} ({row.base_fingerprint[:12]}), "
            f"but the set's base is {base.name} ({base.fingerprint[:12]})"
        )
    return Member(role, label, cid, ref)


def _pinned(mol: MolFile, members: list[Member]) -> dict:
    """The set's configuration with every adapter as an exact commit id."""
    by = {(m.role, m.label): m.commit_id for m in members}
    return {
        "name": mol.name, "protocol": mol.protocol, "base": mol.base,
        "router": {"adapter": by["router", "router"], "labels": mol.labels, "prompt": mol.route_prompt,
                   "default": mol.default},
        "experts": {l: by["expert", l] for l in mol.labels},
        "summary": {"adapter": by["summary", "summary"], "prompt": mol.summary_prompt},
    }  # fmt: skip


# --- reading a set back ----------------------------------------------------------


def set_spec(repo: Repo, rev: str) -> SetSpec:
    """A set commit resolved for serving: member configs and where their weights lie."""
    with repo.db.read() as conn:
        detail = cm.detail(conn, refs.resolve(conn, rev).id)
        if detail.kind != "set":
            raise WrongKind(f"{rev} is an {detail.kind} commit, not a set")
        adapters = {m.commit_id: _adapter_files(repo, conn, m.commit_id) for m in detail.members}
    cfg = detail.config
    prompt = lambda rel: repo.store.local_path(detail.files[rel].sha256).read_text(encoding="utf-8")  # noqa: E731
    return SetSpec(
        id=detail.id, name=detail.line, base=detail.base, base_fingerprint=detail.base_fingerprint,
        protocol=cfg["protocol"], labels=cfg["router"]["labels"], default=cfg["router"]["default"],
        router=adapters[cfg["router"]["adapter"]],
        experts={l: adapters[c] for l, c in cfg["experts"].items()},
        summary=adapters[cfg["summary"]["adapter"]],
        route_prompt=prompt(cfg["router"]["prompt"]), summary_prompt=prompt(cfg["summary"]["prompt"]),
    )  # fmt: skip


def _adapter_files(repo: Repo, conn, cid: str) -> AdapterFiles:
    row = cm.commit_row(conn, cid)
    blob = cm.files_of(conn, cid)[WEIGHTS].sha256
    return AdapterFiles(cid, row.config, str(repo.store.local_path(blob)))


def checkout_plan(conn, detail) -> list[tuple[str, str | bytes]]:
    """(path, blob id or bytes) for a set checkout: mol.toml with commit ids, the prompts,
    and a folder per member with its adapter files."""
    plan: list[tuple[str, str | bytes]] = [(MOL, render_mol(detail.config).encode())]
    plan += [(p, f.sha256) for p, f in detail.files.items()]
    for m in detail.members:
        folder = m.label if m.role == "expert" else m.role
        plan += [(f"{folder}/{p}", f.sha256) for p, f in cm.files_of(conn, m.commit_id).items()]
    return plan


def render_mol(cfg: dict) -> str:
    """The pinned configuration as mol.toml (strings as JSON strings, which TOML accepts)."""
    q = json.dumps
    lines = [f"name = {q(cfg['name'])}", f"protocol = {q(cfg['protocol'])}", f"base = {q(cfg['base'])}", "",
             "[router]", f"adapter = {q(cfg['router']['adapter'])}",
             f"labels = [{', '.join(q(l) for l in cfg['router']['labels'])}]",
             f"prompt = {q(cfg['router']['prompt'])}", f"default = {q(cfg['router']['default'])}", "",
             "[experts]", *[f"{q(l)} = {q(c)}" for l, c in cfg["experts"].items()], "",
             "[summary]", f"adapter = {q(cfg['summary']['adapter'])}", f"prompt = {q(cfg['summary']['prompt'])}"]  # fmt: skip
    return "\n".join(lines) + "\n"
