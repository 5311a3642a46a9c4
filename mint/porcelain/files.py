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
from mint.progress import Progress
from mint.sets.layout import layout_items, member_folder
from mint.sets.mol import PROTOCOL
from mint.signing import signature_items


def checkout(
    repo,
    rev: str,
    dest: str | os.PathLike,
    progress: Progress | None = None,
    *,
    force: bool = False,
) -> CheckoutResult:
    """Write REV's files, byte for byte, into DEST, which must be new or empty; the bytes
    written are reported to PROGRESS (default: counted, shown nowhere). With FORCE, a DEST
    that holds an earlier checkout of REV's line, unchanged, is replaced (`replacing`);
    any other folder is refused (NotACheckout).

    A set checks out as mol.toml with commit ids, its prompts and a folder per member; an
    adapter commit that carries a signature, with its model.sig beside its files."""
    b = backend_of(repo)
    dest = Path(dest)
    occupied = dest.exists() and (not dest.is_dir() or any(dest.iterdir()))
    if not (force and occupied and dest.is_dir()):
        dest = empty_destination(dest)
    detail = b.show(rev)
    items, members = layout(b, detail)
    items += signature_items(detail, members)
    if force and occupied and dest.is_dir():
        from mint.porcelain.replacing import replace_checkout

        def write(folder: Path) -> tuple[int, int]:
            return write_layout(b, items, [detail, *members], folder, progress)

        held, (files, size) = replace_checkout(b, dest, detail, write)
        return CheckoutResult(CommitId(detail.id), str(dest), files, size, replaced=held)
    files, size = write_layout(b, items, [detail, *members], dest, progress)
    return CheckoutResult(CommitId(detail.id), str(dest), files, size)


def write_layout(
    b: Backend, items: list, details: list[CommitDetail], dest: Path, progress: Progress | None
) -> tuple[int, int]:
    """`Backend.write_files` of ITEMS (the files of DETAILS) as one phase of PROGRESS, its
    total known before a byte is written. Returns (files, bytes)."""
    progress = progress or Progress()
    sizes = {f.sha256: f.size for d in details for f in d.files.values()}
    total = sum(len(src) if isinstance(src, bytes) else sizes[src] for _, src in items)
    with progress.phase(total, len(items)):
        return b.write_files(items, dest, progress.advance)


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


def export(repo, rev: str, fmt: str, dest: str | os.PathLike, progress: Progress | None = None):
    """Write REV as PEFT folders (a set: one per member, plus mol.toml and prompts), the
    bytes reported to PROGRESS as `checkout` does.

    `vllm` adds lora-modules.json for `--lora-modules`, router.json with the labels for
    structured `choice` decoding, and serve-vllm.sh with the command line. A signed commit's
    model.sig is written beside its files, as `checkout` writes it."""
    from mint.export import FORMATS, ExportResult, write_vllm_files

    if fmt not in FORMATS:
        raise InvalidConfig(f"unknown export format {fmt!r} (use {' or '.join(FORMATS)})")
    b = backend_of(repo)
    dest = empty_destination(dest)
    detail = b.show(rev)
    items, members = layout(b, detail)
    signed = signature_items(detail, members)  # a signed commit's model.sig, as a checkout's
    write_layout(b, items + signed, [detail, *members], dest, progress)
    if detail.kind == Kind.SET:
        folders = [member_folder(m) for m in detail.members]
        adapters = {f: str((dest / f).resolve()) for f in folders}
        ranks = [d.peft["r"] for d in members]
    else:
        adapters = {detail.line: str(dest.resolve())}
        ranks = [detail.peft["r"]]
    extra = write_vllm_files(detail, dest, adapters, ranks) if fmt == "vllm" else []
    return ExportResult(detail.id, fmt, str(dest), adapters, extra, [p for p, _ in signed])


def set_spec(repo, rev: str) -> SetSpec:
    """A set or adapter commit resolved for serving: member configs, where their weights lie
    on this machine (a registry's blobs are brought into the local blob cache, verified on
    arrival), and the prompts, verified against their ids.

    An adapter commit is served alone (`SetSpec.single`): its line is the one label, and the
    adapter is router, expert and summary at once, so that no routing or summary runs."""
    b = backend_of(repo)
    detail = b.show(rev)
    if detail.kind == Kind.ADAPTER:
        members = {detail.id: detail}
    elif detail.kind == Kind.SET:
        members = {m.commit_id: b.show(m.commit_id) for m in detail.members}
    else:
        raise WrongKind(f"{rev} is a {detail.kind} commit: only a set or an adapter is served")
    sizes = {f.sha256: f.size for d in (detail, *members.values()) for f in d.files.values()}
    store = b.local_blobs(sizes)
    adapters = {cid: _adapter_files(store, d) for cid, d in members.items()}
    if detail.kind == Kind.ADAPTER:
        return _single_spec(detail, adapters[detail.id], sorted(sizes))
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


def _adapter_files(store, d: CommitDetail) -> AdapterFiles:
    """An adapter commit as the runtime loads it, its weights in STORE."""
    if d.config is None or WEIGHTS not in d.files:
        raise InvalidAdapter(d.id, f"commit records no {CONFIG} or {WEIGHTS}: it cannot be served")
    weights = str(store.local_path(d.files[WEIGHTS].sha256))
    return AdapterFiles(
        d.id, d.config, weights, sorted(f.sha256 for f in d.files.values()), d.line
    )


def _single_spec(detail: CommitDetail, files: AdapterFiles, blobs: list[str]) -> SetSpec:
    """The spec of one adapter served alone: its line is the only label and the default, and
    it is the router and the summary too (neither runs: see `SetSpec.single`)."""
    if not detail.base_fingerprint:
        raise InvalidAdapter(detail.id, "commit records no base fingerprint: it cannot be served")
    return SetSpec(
        id=detail.id,
        name=detail.line,
        base=detail.base or "",
        base_fingerprint=detail.base_fingerprint,
        protocol=PROTOCOL,
        labels=[detail.line],
        default=detail.line,
        router=files,
        experts={detail.line: files},
        summary=files,
        route_prompt="",
        summary_prompt="",
        blobs=blobs,
        single=True,
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
