"""Files out of a repository: checkout, export, and a set resolved for serving. The same code
for a local repository (copied from its store) and a registry (downloaded, only what is
needed), every byte verified against its id on the way."""

from __future__ import annotations

import os
from pathlib import Path

from mint.backend import Backend, backend_of
from mint.commits.adapter import CONFIG, WEIGHTS
from mint.errors import DestinationNotEmpty, InvalidAdapter, InvalidConfig, WrongKind
from mint.ids import CommitId, Kind
from mint.objects import AdapterFiles, CheckoutResult, CommitDetail, SetSpec
from mint.sets.layout import layout_items, member_folder


def checkout(repo, rev: str, dest: str | os.PathLike) -> CheckoutResult:
    """Write REV's files, byte for byte, into DEST, which must be new or empty.

    A set checks out as mol.toml with commit ids, its prompts and a folder per member."""
    b = backend_of(repo)
    dest = empty_destination(dest)
    detail = b.show(rev)
    items, _ = layout(b, detail)
    files, size = b.write_files(items, dest)
    return CheckoutResult(CommitId(detail.id), str(dest), files, size)


def empty_destination(dest: str | os.PathLike) -> Path:
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise DestinationNotEmpty(str(dest))
    return dest


def layout(b: Backend, detail: CommitDetail) -> tuple[list, list[CommitDetail]]:
    """((path, blob id or bytes) of every file a checkout of DETAIL writes, its members'
    details)."""
    members = [b.show(m.commit_id) for m in detail.members] if detail.kind == Kind.SET else []
    return layout_items(detail, [d.files for d in members]), members


def export(repo, rev: str, fmt: str, dest: str | os.PathLike):
    """Write REV as PEFT folders (a set: one per member, plus mol.toml and prompts).

    `vllm` adds lora-modules.json for `--lora-modules`, router.json with the labels for
    structured `choice` decoding, and serve-vllm.sh with the command line."""
    from mint.export import FORMATS, ExportResult, write_vllm_files

    if fmt not in FORMATS:
        raise InvalidConfig(f"unknown export format {fmt!r} (use {' or '.join(FORMATS)})")
    b = backend_of(repo)
    dest = empty_destination(dest)
    detail = b.show(rev)
    items, members = layout(b, detail)
    b.write_files(items, dest)
    if detail.kind == Kind.SET:
        folders = [member_folder(m) for m in detail.members]
        adapters = {f: str((dest / f).resolve()) for f in folders}
        ranks = [d.peft["r"] for d in members]
    else:
        adapters = {detail.line: str(dest.resolve())}
        ranks = [detail.peft["r"]]
    extra = write_vllm_files(detail, dest, adapters, ranks) if fmt == "vllm" else []
    return ExportResult(detail.id, fmt, str(dest), adapters, extra)


def set_spec(repo, rev: str) -> SetSpec:
    """A set commit resolved for serving: member configs, where their weights lie on this
    machine (a registry's blobs are brought into the local blob cache, verified on arrival),
    and the prompts, verified against their ids."""
    b = backend_of(repo)
    detail = b.show(rev)
    if detail.kind != Kind.SET:
        raise WrongKind(f"{rev} is an {detail.kind} commit, not a set")
    members = {m.commit_id: b.show(m.commit_id) for m in detail.members}
    sizes = {f.sha256: f.size for d in (detail, *members.values()) for f in d.files.values()}
    store = b.local_blobs(sizes)
    adapters = {
        cid: AdapterFiles(
            cid,
            d.config,
            str(store.local_path(d.files[WEIGHTS].sha256)),
            sorted(f.sha256 for f in d.files.values()),
            d.line,
        )
        for cid, d in members.items()
    }
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
        route_prompt=_prompt(store, detail, cfg["router"]["prompt"]),
        summary_prompt=_prompt(store, detail, cfg["summary"]["prompt"]),
        blobs=sorted(sizes),
    )


def _prompt(store, detail: CommitDetail, rel: str) -> str:
    blob = detail.files[rel].sha256
    store.verify(blob)
    try:
        return store.local_path(blob).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidConfig(f"prompt {rel} of set {detail.id[:12]} is not UTF-8 text") from None


def adapter_config(repo, rev: str) -> dict:
    """The adapter_config.json recorded with the adapter commit REV names."""
    d = backend_of(repo).show(rev)
    if d.kind != Kind.ADAPTER:
        raise WrongKind(f"{d.id[:12]} is a {d.kind} commit, not an adapter")
    if d.config is None:
        raise InvalidAdapter(d.id, f"commit records no {CONFIG}")
    return d.config
