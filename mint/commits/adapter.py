"""Read and check a PEFT adapter folder before anything is stored.

`scan_adapter` walks the folder and checks everything (the config, the safetensors header,
tensor names against target modules, shapes against `r`), and touches nothing.
`hash_adapter` then reads each file once to compute blob ids and per-tensor hashes.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from mint.errors import InvalidAdapter, NotAnAdapter, PickleRefused, UnsafePath
from mint.commits.safetensors import SafetensorsHeader, hash_file_and_tensors, read_header
from mint.store import sha256_file

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
SUPPORTED_PEFT_TYPES = ("LORA",)
# How PEFT names a LoRA tensor in a saved adapter: <module>.<lora part>[.weight|.bias]
_LORA_KEY = re.compile(
    r"^(?P<module>.+)\.(?P<part>lora_A|lora_B|lora_embedding_A|lora_embedding_B|"
    r"lora_magnitude_vector)(?:\.(?:weight|bias))?$"
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class ScannedFile:
    path: str  # relative, POSIX
    abspath: Path
    size: int


@dataclass(frozen=True)
class ScannedAdapter:
    """A checked adapter folder: its files, config, header and PEFT summary."""

    root: Path
    files: tuple[ScannedFile, ...]
    config: dict
    header: SafetensorsHeader
    peft: dict
    base_name: str | None


@dataclass(frozen=True)
class HashedAdapter:
    scanned: ScannedAdapter
    blobs: dict[str, str]  # path -> sha256
    tensor_hashes: dict[str, str] = field(default_factory=dict)


def safe_relpath(path: str) -> str:
    """Return `path` if it is a safe relative POSIX path inside a folder, else raise."""
    p = PurePosixPath(path)
    if (
        not path
        or p.is_absolute()
        or "\\" in path
        or _CONTROL.search(path)
        or any(part in ("", ".", "..") for part in path.split("/"))
    ):
        raise UnsafePath(path)
    return path


def scan_adapter(root: str | Path) -> ScannedAdapter:
    """Check an adapter folder without writing anything; raise InvalidAdapter on any problem."""
    root = Path(root)
    if not root.is_dir():
        raise InvalidAdapter(root, "not a folder")
    files = _walk(root)
    names = {f.path for f in files}
    if CONFIG not in names:
        raise NotAnAdapter(root, f"no {CONFIG}")
    if WEIGHTS not in names:
        raise NotAnAdapter(root, f"no {WEIGHTS}")
    config = _read_config(root / CONFIG)
    header = read_header(root / WEIGHTS)
    peft = check_tensors(root, config, header)
    base_name = config.get("base_model_name_or_path")
    return ScannedAdapter(root, tuple(files), config, header, peft, base_name)


def _walk(root: Path) -> list[ScannedFile]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            abspath = Path(dirpath) / name
            rel = abspath.relative_to(root).as_posix()
            safe_relpath(rel)
            if abspath.is_symlink():
                raise InvalidAdapter(root, f"{rel} is a symbolic link; mint stores regular files only")
            if name.lower().endswith(PICKLE_SUFFIXES):
                raise PickleRefused(root, rel)
            out.append(ScannedFile(rel, abspath, abspath.stat().st_size))
    return out


def _read_config(path: Path) -> dict:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidAdapter(path.parent, f"{CONFIG} is not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise InvalidAdapter(path.parent, f"{CONFIG} does not hold a JSON object")
    peft_type = config.get("peft_type")
    if peft_type not in SUPPORTED_PEFT_TYPES:
        raise InvalidAdapter(
            path.parent, f"unsupported peft_type {peft_type!r} (mint stores {', '.join(SUPPORTED_PEFT_TYPES)})"
        )
    r = config.get("r")
    if not isinstance(r, int) or r <= 0:
        raise InvalidAdapter(path.parent, f"r must be a positive integer, found {r!r}")
    return config


def peft_summary(config: dict) -> dict:
    targets = config.get("target_modules")
    if isinstance(targets, list):
        targets = sorted(targets)
    return {
        "peft_type": config.get("peft_type"),
        "r": config.get("r"),
        "lora_alpha": config.get("lora_alpha"),
        "target_modules": targets,
    }


def check_tensors(root: Path, config: dict, header: SafetensorsHeader) -> dict:
    """Tensor names must match target modules (or modules_to_save); shapes must agree with r."""
    targets = config.get("target_modules")
    to_save = config.get("modules_to_save") or []
    if not header.tensors:
        raise InvalidAdapter(root, f"{WEIGHTS} holds no tensors")
    parts: dict[str, set[str]] = {}
    for t in header.tensors:
        m = _LORA_KEY.match(t.name)
        module = _strip_prefix(m.group("module")) if m else _strip_prefix(t.name)
        if not m:
            if any(module == s or f".{s}." in f".{module}." for s in to_save):
                continue
            raise InvalidAdapter(root, f"tensor {t.name} is not a LoRA tensor of any target module")
        if not _targets(module, targets):
            raise InvalidAdapter(root, f"tensor {t.name} is on {module}, which target_modules {targets!r} does not name")
        part = m.group("part")
        parts.setdefault(module, set()).add(part)
        _check_rank(root, t.name, part, t.shape, _rank_for(module, config))
    for module, seen in parts.items():
        if ("lora_A" in seen) != ("lora_B" in seen):
            raise InvalidAdapter(root, f"module {module} has only one of lora_A and lora_B")
    return peft_summary(config)


def _strip_prefix(name: str) -> str:
    return name.removeprefix("base_model.model.")


def _targets(module: str, targets) -> bool:
    if isinstance(targets, str):
        return targets == "all-linear" or re.fullmatch(targets, module) is not None
    if isinstance(targets, list):
        return any(module == t or module.endswith("." + t) for t in targets)
    return False


def _rank_for(module: str, config: dict) -> int:
    for pattern, r in (config.get("rank_pattern") or {}).items():
        if re.fullmatch(rf"(.*\.)?{pattern}", module):
            return r
    return config["r"]


def _check_rank(root: Path, name: str, part: str, shape: tuple[int, ...], r: int) -> None:
    if part == "lora_magnitude_vector" or name.endswith(".bias"):
        return
    axis = 0 if part in ("lora_A", "lora_embedding_A") else 1
    if len(shape) < 2 or shape[axis] != r:
        raise InvalidAdapter(root, f"tensor {name} has shape {list(shape)}, which does not agree with r={r}")


def check_against_base(root: Path, header: SafetensorsHeader, base_config: dict, base: str) -> None:
    """Catch an adapter trained for another network: layer indices and hidden sizes must fit."""
    layers = base_config.get("num_hidden_layers")
    hidden = base_config.get("hidden_size")
    for t in header.tensors:
        m = _LORA_KEY.match(t.name)
        if not m or len(t.shape) != 2:
            continue
        module = m.group("module")
        idx = re.search(r"\.layers\.(\d+)\.", module)
        if layers is not None and idx and int(idx.group(1)) >= layers:
            raise InvalidAdapter(root, f"tensor {t.name} is for layer {idx.group(1)}, but base {base} has {layers} layers")
        leaf = module.rsplit(".", 1)[-1]
        if hidden is None:
            continue
        if m.group("part") == "lora_A" and leaf in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"):
            found = t.shape[1]
        elif m.group("part") == "lora_B" and leaf in ("o_proj", "down_proj"):
            found = t.shape[0]
        else:
            continue
        if found != hidden:
            raise InvalidAdapter(root, f"tensor {t.name} is {found} wide, but base {base} has hidden_size {hidden}")


def hash_adapter(scanned: ScannedAdapter) -> HashedAdapter:
    """Hash every file once; the weights file's tensors are hashed in the same read."""
    blobs, tensor_hashes = {}, {}
    for f in scanned.files:
        if f.path == WEIGHTS:
            blobs[f.path], tensor_hashes = hash_file_and_tensors(f.abspath, scanned.header)
        else:
            blobs[f.path] = sha256_file(f.abspath)
    return HashedAdapter(scanned, blobs, tensor_hashes)
