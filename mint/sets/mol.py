"""mol.toml: the MoL configuration file, parsed and rendered."""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from mint.commits.adapter import safe_relpath
from mint.errors import InvalidConfig, UnsafePath
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


# Names a set's checkout and its vLLM export write beside the member folders.
EXPORT_FILES = ("lora-modules.json", "router.json", "serve-vllm.sh")
ROLE_FOLDERS = ("router", "summary")
_STRINGS = (
    ("name", None, "name"),
    ("base", None, "base"),
    ("router.adapter", "router", "adapter"),
    ("router.prompt", "router", "prompt"),
    ("summary.adapter", "summary", "adapter"),
    ("summary.prompt", "summary", "prompt"),
)


def parse_mol(path: str | os.PathLike) -> MolFile:
    """Read and check mol.toml at PATH (prompt paths are relative to its folder)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidConfig(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise InvalidConfig(f"{path} is not UTF-8 text") from None
    return parse_mol_text(text, path.parent, str(path))


def parse_mol_text(text: str, folder: Path, source: str = MOL) -> MolFile:
    """Check mol.toml's TEXT; every problem is one InvalidConfig naming SOURCE."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidConfig(f"{source} is not valid TOML: {exc}") from None
    return mol_from_table(raw, folder, source)


def mol_from_table(raw: dict, folder: Path, source: str = MOL) -> MolFile:
    """Check mol.toml's parsed table RAW (also a set commit's stored config, whose adapters
    are commit ids: a received set is checked by these same rules)."""
    bad = lambda why: InvalidConfig(f"{source}: {why}")  # noqa: E731
    tables = {k: raw.get(k) for k in ("router", "experts", "summary")}
    if not all(isinstance(t, dict) for t in tables.values()):
        raise bad("needs [router], [experts] and [summary] tables")
    for key, table, field in _STRINGS:
        value = (tables[table] if table else raw).get(field)
        if not isinstance(value, str) or not value:
            raise bad(f"{key} must be a non-empty string")
    protocol = raw.get("protocol", PROTOCOL)
    if protocol != PROTOCOL:
        raise bad(f"protocol {protocol!r} is not supported (mint speaks {PROTOCOL})")
    router, experts, summary = tables["router"], tables["experts"], tables["summary"]
    labels = _labels(router, experts, bad)
    check_name("set", raw["name"])
    mol = MolFile(
        raw["name"],
        protocol,
        raw["base"],
        router["adapter"],
        labels,
        router["prompt"],
        router.get("default", labels[0]),
        {label: experts[label] for label in labels},
        summary["adapter"],
        summary["prompt"],
        folder,
    )
    if mol.default not in labels:
        raise bad(f"router.default {mol.default!r} is not one of the labels")
    check_layout(mol, bad)
    return mol


def _labels(router: dict, experts: dict, bad) -> list[str]:
    labels = router.get("labels")
    if not (isinstance(labels, list) and labels and all(isinstance(x, str) for x in labels)):
        raise bad("router.labels must be a non-empty list of strings")
    if len(set(labels)) != len(labels):
        raise bad("router.labels has duplicates")
    for label in labels:
        check_name("label", label)
    missing = [x for x in labels if x not in experts]
    if missing:
        raise bad(f"label {missing[0]!r} has no expert in [experts]")
    extra = [x for x in experts if x not in labels]
    if extra:
        raise bad(f"expert {extra[0]!r} is not one of router.labels")
    if not all(isinstance(experts[x], str) and experts[x] for x in labels):
        raise bad("every expert must name an adapter revision (a non-empty string)")
    return list(labels)


def check_layout(mol: MolFile, bad) -> None:
    """The checkout lays mol.toml, the prompts, one folder per member and the export files
    side by side: refuse any two that would land on the same path."""
    reserved = {n.casefold(): f"the file {n}" for n in (MOL, *EXPORT_FILES)}
    reserved |= {n: f"the {n} adapter's folder" for n in ROLE_FOLDERS}
    for label in mol.labels:
        if label.casefold() in reserved:
            raise bad(f"label {label!r} collides with {reserved[label.casefold()]} in a checkout")
        reserved[label.casefold()] = f"expert {label}'s folder"
    for key, prompt in (
        ("router.prompt", mol.route_prompt),
        ("summary.prompt", mol.summary_prompt),
    ):
        try:
            safe_relpath(prompt)
        except UnsafePath:
            raise bad(
                f"{key} {prompt!r} must be a relative path inside the set's folder"
            ) from None
        top = prompt.split("/", 1)[0].casefold()
        if top in reserved:
            raise bad(f"{key} {prompt!r} collides with {reserved[top]} in a checkout")


def toml_string(value: str) -> str:
    """VALUE as a TOML basic string. JSON's escapes are not TOML's: JSON writes a character
    outside the Basic Multilingual Plane as a surrogate pair (`\\ud83d\\ude00`), which TOML
    refuses, and leaves DEL bare, which TOML forbids. Here every other character is written as
    itself (the file is UTF-8); quotes, backslashes and control characters are escaped. A lone
    surrogate is no Unicode scalar value: neither UTF-8 nor TOML can hold it, so it is refused."""
    if not isinstance(value, str):
        raise InvalidConfig(f"{MOL} holds strings only, not {type(value).__name__}")
    lone = _SURROGATE.search(value)
    if lone is not None:
        code = f"U+{ord(lone.group()):04X}"
        raise InvalidConfig(f"{value!r} holds a lone surrogate ({code}): {MOL} cannot hold it")
    return '"' + _ESCAPED.sub(_escape, value) + '"'


_SURROGATE = re.compile(r"[\ud800-\udfff]")
_ESCAPED = re.compile(r'["\\\x00-\x1f\x7f]')
_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n"}
_SHORT |= {"\f": "\\f", "\r": "\\r"}


def _escape(m: re.Match) -> str:
    c = m.group()
    return _SHORT.get(c) or f"\\u{ord(c):04X}"


def render_mol(cfg: dict) -> str:
    """The pinned configuration as mol.toml (every string a TOML basic string)."""
    q = toml_string
    lines = [
        f"name = {q(cfg['name'])}",
        f"protocol = {q(cfg['protocol'])}",
        f"base = {q(cfg['base'])}",
        "",
        "[router]",
        f"adapter = {q(cfg['router']['adapter'])}",
        f"labels = [{', '.join(q(l) for l in cfg['router']['labels'])}]",
        f"prompt = {q(cfg['router']['prompt'])}",
        f"default = {q(cfg['router']['default'])}",
        "",
        "[experts]",
        *[f"{q(l)} = {q(c)}" for l, c in cfg["experts"].items()],
        "",
        "[summary]",
        f"adapter = {q(cfg['summary']['adapter'])}",
        f"prompt = {q(cfg['summary']['prompt'])}",
    ]
    return "\n".join(lines) + "\n"
