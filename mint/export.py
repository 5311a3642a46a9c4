"""What an export writes beside the PEFT folders: a signed commit's model.sig, and for vLLM its
files (the export itself, from a local repository or a registry, is
`mint.porcelain.files.export`)."""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from mint.ids import Kind
from mint.sets.mol import PREFILL

FORMATS = ("peft", "vllm")


@dataclass(frozen=True)
class ExportResult:
    id: str
    format: str
    path: str
    adapters: dict[str, str]  # name -> folder
    files: list[str]  # extra files written for the format
    signatures: list[str] = field(default_factory=list)  # the model.sig files written


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
