"""Export a revision for other servers: plain PEFT folders, or a vLLM-ready layout."""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from mint.commits import rows
from mint.commits.files import write_files
from mint.commits.operations import checkout_items
from mint.errors import DestinationNotEmpty, InvalidConfig
from mint.ids import Kind
from mint.refs import resolve
from mint.repo import Repo
from mint.sets.layout import member_folder
from mint.sets.mol import PREFILL

FORMATS = ("peft", "vllm")


@dataclass(frozen=True)
class ExportResult:
    id: str
    format: str
    path: str
    adapters: dict[str, str]  # name -> folder
    files: list[str]  # extra files written for the format


def export(repo: Repo, rev: str, fmt: str, dest: str | os.PathLike) -> ExportResult:
    """Write REV as PEFT folders (a set: one per member, plus mol.toml and prompts).

    `vllm` adds lora-modules.json for `--lora-modules`, router.json with the labels for
    structured `choice` decoding, and serve-vllm.sh with the command line.
    """
    if fmt not in FORMATS:
        raise InvalidConfig(f"unknown export format {fmt!r} (use {' or '.join(FORMATS)})")
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise DestinationNotEmpty(str(dest))
    with repo.db.read() as conn:
        detail = rows.detail(conn, resolve(conn, rev).id)
        items = checkout_items(conn, detail.id)
        members = detail.members or []
        ranks = [rows.commit_row(conn, m.commit_id).peft["r"] for m in members]
    write_files(repo.store, items, dest)
    if detail.kind == Kind.SET:
        adapters = {member_folder(m): str((dest / member_folder(m)).resolve()) for m in members}
    else:
        adapters = {detail.line: str(dest.resolve())}
        ranks = [detail.peft["r"]]
    extra = write_vllm_files(detail, dest, adapters, ranks) if fmt == "vllm" else []
    return ExportResult(detail.id, fmt, str(dest), adapters, extra)


def write_vllm_files(detail, dest: Path, adapters: dict[str, str], ranks: list[int]) -> list[str]:
    base = detail.base or ""
    modules = [
        {"name": name, "path": path, "base_model_name": base} for name, path in adapters.items()
    ]
    files = {"lora-modules.json": json.dumps(modules, indent=2) + "\n"}
    if detail.kind == Kind.SET:
        cfg = detail.config
        files["router.json"] = (
            json.dumps(
                {
                    "set": detail.line,
                    "commit": detail.id,
                    "protocol": cfg["protocol"],
                    "router": "router",
                    "prompt": cfg["router"]["prompt"],
                    "prefill": PREFILL,
                    "labels": cfg["router"]["labels"],
                    "default": cfg["router"]["default"],
                    "summary": "summary",
                    # vLLM's structured outputs: the router may answer with one of the labels only
                    "structured_outputs": {"choice": cfg["router"]["labels"]},
                },
                indent=2,
            )
            + "\n"
        )
    args = [
        "vllm",
        "serve",
        "BASE_MODEL_PATH",
        "--enable-lora",
        "--max-lora-rank",
        str(max(ranks)),
        "--max-loras",
        str(len(modules)),
        "--lora-modules",
        *(f"{m['name']}={m['path']}" for m in modules),
    ]
    files["serve-vllm.sh"] = (
        "#!/bin/sh\n# Replace BASE_MODEL_PATH with the frozen base "
        + shlex.quote(base)
        + "\n"
        + shlex.join(args)
        + "\n"
    )
    for name, text in files.items():
        (dest / name).write_text(text, encoding="utf-8")
    os.chmod(dest / "serve-vllm.sh", 0o755)
    return sorted(files)
