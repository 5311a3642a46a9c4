"""mol.toml: the MoL configuration file, parsed and rendered."""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from mint.errors import InvalidConfig
from mint.refs import check_name

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
        check_name("label", label)
    missing = [l for l in labels if l not in experts]
    if missing:
        raise bad(f"label {missing[0]!r} has no expert in [experts]")
    extra = [e for e in experts if e not in labels]
    if extra:
        raise bad(f"expert {extra[0]!r} is not one of router.labels")
    default = router.get("default", labels[0])
    if default not in labels:
        raise bad(f"router.default {default!r} is not one of the labels")
    check_name("set", raw["name"])
    return MolFile(raw["name"], protocol, raw["base"], router["adapter"], list(labels), router["prompt"],
                   default, {l: experts[l] for l in labels}, summary["adapter"], summary["prompt"],
                   path.parent)  # fmt: skip


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
