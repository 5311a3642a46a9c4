"""Files out of a registry: checkout (the same layout as a local one, sets included), export,
and evaluate, whose evaluator runs here on a downloaded checkout."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from mint import __version__
from mint.errors import DestinationNotEmpty, EvaluationFailed, InvalidConfig
from mint.ids import CommitId, EvalSource, Kind
from mint.objects import CheckoutResult, CommitDetail, Evaluation
from mint.remote import reads
from mint.remote.blobs import download_files
from mint.remote.repo import RemoteRepo
from mint.sets.layout import member_folder
from mint.sets.mol import MOL, render_mol


def checkout(repo: RemoteRepo, rev: str, dest: str | os.PathLike) -> CheckoutResult:
    """Download REV's files into DEST (new or empty), each verified against its id."""
    dest = _empty_destination(dest)
    detail = reads.show(repo, rev)
    items, _ = _layout(repo, detail)
    files, size = download_files(repo.client, items, dest)
    return CheckoutResult(CommitId(detail.id), str(dest), files, size)


def _empty_destination(dest: str | os.PathLike) -> Path:
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise DestinationNotEmpty(str(dest))
    return dest


def _layout(repo: RemoteRepo, detail: CommitDetail):
    """((path, blob id or bytes) of every file a checkout writes, the members' details).

    A set lays out as mint.sets.layout does: mol.toml with commit ids, the prompts, and a
    folder per member with its adapter files."""
    if detail.kind != Kind.SET:
        return [(p, f.sha256) for p, f in detail.files.items()], []
    members = [reads.show(repo, m.commit_id) for m in detail.members]
    plan: list[tuple[str, str | bytes]] = [(MOL, render_mol(detail.config).encode())]
    plan += [(p, f.sha256) for p, f in detail.files.items()]
    for m, d in zip(detail.members, members):
        plan += [(f"{member_folder(m)}/{p}", f.sha256) for p, f in d.files.items()]
    return plan, members


def export(repo: RemoteRepo, rev: str, fmt: str, dest: str | os.PathLike):
    """Write REV as PEFT folders, or ready for vLLM, from the registry's bytes."""
    from mint.export import FORMATS, ExportResult, write_vllm_files

    if fmt not in FORMATS:
        raise InvalidConfig(f"unknown export format {fmt!r} (use {' or '.join(FORMATS)})")
    dest = _empty_destination(dest)
    detail = reads.show(repo, rev)
    items, members = _layout(repo, detail)
    download_files(repo.client, items, dest)
    if detail.kind == Kind.SET:
        folders = [member_folder(m) for m in detail.members]
        adapters = {f: str((dest / f).resolve()) for f in folders}
        ranks = [d.peft["r"] for d in members]
    else:
        adapters = {detail.line: str(dest.resolve())}
        ranks = [detail.peft["r"]]
    extra = write_vllm_files(detail, dest, adapters, ranks) if fmt == "vllm" else []
    return ExportResult(detail.id, fmt, str(dest), adapters, extra)


def evaluate(repo: RemoteRepo, rev: str, contract: str, *, by: str) -> Evaluation:
    """Run CONTRACT's evaluator here on a checkout of REV; record the result on the registry."""
    from mint.gates.evaluator import hash_data, parse_metrics, run_command
    from mint.remote.operations import record_evaluation

    c = reads.contract_show(repo, contract)
    ev = c.evaluator
    if not ev:
        raise EvaluationFailed(
            f"contract {c.name} has no [evaluator]; record results with --metric KEY=VALUE"
        )
    cid = reads.resolve(repo, rev)
    with tempfile.TemporaryDirectory(prefix="mint-eval-") as tmp:
        folder = Path(tmp) / "checkout"
        checkout(repo, cid, folder)
        argv = [
            a.replace("{checkout}", str(folder)).replace("{commit}", cid) for a in ev["command"]
        ]
        metrics = parse_metrics(run_command(argv, ev["timeout"]), {"metrics": c.metrics})
    info = {"command": ev["command"], "version": ev.get("version"), "mint": __version__}
    return record_evaluation(
        repo,
        cid,
        c.name,
        metrics,
        source=EvalSource.EVALUATOR,
        evaluator=info,
        data_hash=hash_data(ev.get("data")),
        by=by,
    )


def set_spec(repo: RemoteRepo, rev: str):
    """A set commit of the registry resolved for serving: every blob it uses is brought into
    the local blob cache (verified on arrival), and the spec points at the cached files."""
    from mint.commits.adapter import WEIGHTS
    from mint.errors import WrongKind
    from mint.objects import AdapterFiles, SetSpec
    from mint.remote.blobs import fetch_into_store

    detail = reads.show(repo, rev)
    if detail.kind != Kind.SET:
        raise WrongKind(f"{rev} is an {detail.kind} commit, not a set")
    members = {m.commit_id: reads.show(repo, m.commit_id) for m in detail.members}
    sizes = {f.sha256: f.size for d in (detail, *members.values()) for f in d.files.values()}
    fetch_into_store(repo.client, repo.store, sizes, repo.cache)
    adapters = {
        cid: AdapterFiles(
            cid,
            d.config,
            str(repo.store.local_path(d.files[WEIGHTS].sha256)),
            sorted(f.sha256 for f in d.files.values()),
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
        route_prompt=_prompt(repo, detail, cfg["router"]["prompt"]),
        summary_prompt=_prompt(repo, detail, cfg["summary"]["prompt"]),
        blobs=sorted(sizes),
    )


def _prompt(repo: RemoteRepo, detail: CommitDetail, rel: str) -> str:
    blob = detail.files[rel].sha256
    repo.store.verify(blob)
    try:
        return repo.store.local_path(blob).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidConfig(f"prompt {rel} of set {detail.id[:12]} is not UTF-8 text") from None
