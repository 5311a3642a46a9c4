"""Read and check a PEFT adapter folder before anything is stored.

`scan_adapter` walks the folder and checks everything (the config, the safetensors header,
tensor names against target modules, shapes against `r`), and touches nothing; given a stat
cache, it takes an unchanged file's config or header from there instead of reading it.
`hash_adapter` then reads each file once to compute blob ids and per-tensor hashes (a commit
does that in the pass that copies the files into the store: `mint.commits.ingest`).
"""

from __future__ import annotations

import json
import os
import re
import stat as stat_mode
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from mint.commits.safetensors import (
    SafetensorsHeader,
    hash_file_and_tensors,
    parse_header,
    read_prefix,
)
from mint.commits.statcache import FileStat, StatCache
from mint.commits.targets import ranks, targeted
from mint.errors import InvalidAdapter, NotAnAdapter, PickleRefused, UnsafePath
from mint.ids import is_pickle
from mint.store import sha256_file

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
# Pickled weights a loader would pick up (PEFT's adapter_model.bin, transformers'
# pytorch_model*.bin) are refused. Any other pickle (the Trainer's training_args.bin) is kept as
# an inert file of the commit, marked as a pickle wherever files are listed; mint never loads it.
MAX_FILES = 5_000  # files in an adapter folder, at most (PEFT writes a few; more is no adapter)
_PICKLED_WEIGHTS = re.compile(r"^(adapter_model|pytorch_model)([-.].*)?$")
SUPPORTED_PEFT_TYPES = ("LORA",)
# How PEFT names a LoRA tensor in a saved adapter: <module>.<lora part>[.weight|.bias]
_LORA_KEY = re.compile(
    r"^(?P<module>.+)\.(?P<part>lora_A|lora_B|lora_embedding_A|lora_embedding_B|"
    r"lora_magnitude_vector)(?:\.(?:weight|bias))?$"
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_LAYER = re.compile(r"\.layers\.(\d+)\.")


@dataclass(frozen=True)
class ScannedFile:
    path: str  # relative, POSIX
    abspath: Path
    size: int
    stat: FileStat | None = None  # as the scan found it, before anything was read


@dataclass(frozen=True)
class ScannedAdapter:
    """A checked adapter folder: its files, config, header and PEFT summary."""

    root: Path
    files: tuple[ScannedFile, ...]
    config: dict
    header: SafetensorsHeader
    peft: dict
    base_name: str | None
    config_raw: bytes = b""  # the config's bytes, as parsed
    seen_ns: int = 0  # when the files were looked at (time.time_ns), before any was read


@dataclass(frozen=True)
class HashedAdapter:
    scanned: ScannedAdapter
    blobs: dict[str, str]  # path -> sha256
    tensor_hashes: dict[str, str] = field(default_factory=dict)


def is_pickled_weights(path: str) -> bool:
    """Whether PATH is pickled weights that a loader (PEFT, transformers) would load."""
    name = path.rsplit("/", 1)[-1]
    return is_pickle(path) and _PICKLED_WEIGHTS.match(name.lower()) is not None


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


def scan_adapter(root: str | Path, *, cache: StatCache | None = None) -> ScannedAdapter:
    """Check an adapter folder without writing anything; raise InvalidAdapter on any problem.

    With CACHE, an unchanged file's config or header comes from the stat cache: nothing
    of an unchanged folder is read."""
    root, files, seen_ns = walk_adapter(root)
    names = {f.path: f for f in files}
    config_raw = _leading_bytes(names[CONFIG], cache, lambda f: f.abspath.read_bytes())
    config = _parse_config(config_raw, root)
    weights = names[WEIGHTS]
    raw = _leading_bytes(weights, cache, lambda f: read_prefix(f.abspath, f.size))
    header = parse_header(raw, weights.size, weights.abspath)
    peft = check_tensors(root, config, header)
    base_name = config.get("base_model_name_or_path")
    return ScannedAdapter(root, tuple(files), config, header, peft, base_name, config_raw, seen_ns)


def walk_adapter(root: str | Path) -> tuple[Path, list[ScannedFile], int]:
    """The folder's files as `lstat` finds them, and when it looked (time.time_ns, before):
    regular files only, no pickled weights, a config and weights among them. Reads no file."""
    root = Path(root)
    if not root.is_dir():
        raise InvalidAdapter(root, "not a folder")
    seen_ns = time.time_ns()
    files = _walk(root)
    if len(files) > MAX_FILES:
        raise InvalidAdapter(root, f"{len(files)} files: an adapter holds at most {MAX_FILES}")
    names = {f.path for f in files}
    if CONFIG not in names:
        raise NotAnAdapter(root, f"no {CONFIG}")
    if WEIGHTS not in names:
        raise NotAnAdapter(root, f"no {WEIGHTS}")
    return root, files, seen_ns


def _leading_bytes(f: ScannedFile, cache: StatCache | None, read) -> bytes:
    known = cache.get(f.abspath, f.stat) if cache is not None else None
    return known.head if known is not None and known.head is not None else read(f)


def _walk(root: Path) -> list[ScannedFile]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        for name in dirnames:
            if (here / name).is_symlink():  # os.walk lists a linked folder but never enters it
                rel = _rel(root, here / name)
                raise InvalidAdapter(
                    root, f"{rel} is a symbolic link; mint stores regular files only"
                )
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if not name.startswith("."):
                out.append(_scanned(root, here / name))
    return out


def _rel(root: Path, path: Path) -> str:
    rel = path.relative_to(root).as_posix()
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:  # os.walk hands undecodable bytes back as surrogates
        shown = rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        raise InvalidAdapter(root, f"file name {shown!r} is not UTF-8") from None
    return safe_relpath(rel)


def _scanned(root: Path, abspath: Path) -> ScannedFile:
    rel = _rel(root, abspath)
    st = abspath.lstat()
    if stat_mode.S_ISLNK(st.st_mode):
        raise InvalidAdapter(root, f"{rel} is a symbolic link; mint stores regular files only")
    if not stat_mode.S_ISREG(st.st_mode):
        raise InvalidAdapter(root, f"{rel} is not a regular file")
    if is_pickled_weights(rel):
        raise PickleRefused(root, rel)
    return ScannedFile(rel, abspath, st.st_size, FileStat.of(st))


def _parse_config(raw: bytes, folder: Path) -> dict:
    try:
        config = json.loads(raw.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidAdapter(folder, f"{CONFIG} is not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise InvalidAdapter(folder, f"{CONFIG} does not hold a JSON object")
    peft_type = config.get("peft_type")
    if peft_type not in SUPPORTED_PEFT_TYPES:
        raise InvalidAdapter(
            folder,
            f"unsupported peft_type {peft_type!r} (mint stores {', '.join(SUPPORTED_PEFT_TYPES)})",
        )
    r = config.get("r")
    if not isinstance(r, int) or r <= 0:
        raise InvalidAdapter(folder, f"r must be a positive integer, found {r!r}")
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
    to_save = config.get("modules_to_save") or []
    if not header.tensors:
        raise InvalidAdapter(root, f"{WEIGHTS} holds no tensors")
    lora: dict[str, list] = {}  # module -> [(tensor, part)]
    for t in header.tensors:
        m = _LORA_KEY.match(t.name)
        if m:
            lora.setdefault(_strip_prefix(m.group("module")), []).append((t, m.group("part")))
            continue
        module = _strip_prefix(t.name)
        if not any(module == s or f".{s}." in f".{module}." for s in to_save):
            raise InvalidAdapter(
                root, f"tensor {t.name} is not a LoRA tensor of any target module"
            )
    modules = sorted(lora)
    named = targeted(root, modules, config.get("target_modules"))
    rank = ranks(root, modules, config)
    for module in modules:
        if module not in named:
            targets = config.get("target_modules")
            raise InvalidAdapter(
                root,
                f"tensor {lora[module][0][0].name} is on {module}, which target_modules "
                f"{targets!r} does not name",
            )
        for t, part in lora[module]:
            _check_rank(root, t.name, part, t.shape, rank[module])
        seen = {part for _, part in lora[module]}
        if ("lora_A" in seen) != ("lora_B" in seen):
            raise InvalidAdapter(root, f"module {module} has only one of lora_A and lora_B")
    return peft_summary(config)


def _strip_prefix(name: str) -> str:
    return name.removeprefix("base_model.model.")


def _check_rank(root: Path, name: str, part: str, shape: tuple[int, ...], r: int) -> None:
    if part == "lora_magnitude_vector" or name.endswith(".bias"):
        return
    axis = 0 if part in ("lora_A", "lora_embedding_A") else 1
    if len(shape) < 2 or shape[axis] != r:
        raise InvalidAdapter(
            root, f"tensor {name} has shape {list(shape)}, which does not agree with r={r}"
        )


def projection_shapes(base_config: dict) -> dict[str, tuple[int | None, int | None]]:
    """(in, out) features of each projection a LoRA attaches to, for a Llama-style base."""
    h, heads = base_config.get("hidden_size"), base_config.get("num_attention_heads")
    kv = base_config.get("num_key_value_heads") or heads
    hd = base_config.get("head_dim") or (h // heads if h and heads else None)
    inter = base_config.get("intermediate_size")
    q = heads * hd if heads and hd else None
    kvd = kv * hd if kv and hd else None
    return {
        "q_proj": (h, q),
        "k_proj": (h, kvd),
        "v_proj": (h, kvd),
        "o_proj": (q, h),
        "gate_proj": (h, inter),
        "up_proj": (h, inter),
        "down_proj": (inter, h),
    }


def check_against_base(
    root: Path, header: SafetensorsHeader, base_config: dict, base: str
) -> None:
    """Catch an adapter trained for another network: layer indices and every LoRA matrix's
    outer dimension must fit the base (lora_A is r x in, lora_B is out x r)."""
    layers = base_config.get("num_hidden_layers")
    shapes = projection_shapes(base_config)
    for t in header.tensors:
        m = _LORA_KEY.match(t.name)
        if not m or len(t.shape) != 2:
            continue
        module = m.group("module")
        idx = _LAYER.search(module)
        if layers is not None and idx and int(idx.group(1)) >= layers:
            raise InvalidAdapter(
                root,
                f"tensor {t.name} is for layer {idx.group(1)}, but base {base} has {layers} "
                "layers",
            )
        features = shapes.get(module.rsplit(".", 1)[-1])
        if features is None or m.group("part") not in ("lora_A", "lora_B"):
            continue
        side, found = (0, t.shape[1]) if m.group("part") == "lora_A" else (1, t.shape[0])
        need = features[side]
        if need is not None and found != need:
            what = "input" if side == 0 else "output"
            raise InvalidAdapter(
                root,
                f"tensor {t.name} has shape {list(t.shape)}, but base {base}'s "
                f"{module.rsplit('.', 1)[-1]} has {need} {what} features",
            )


def hash_adapter(scanned: ScannedAdapter) -> HashedAdapter:
    """Hash every file once; the weights file's tensors are hashed, and its values checked
    for NaN and infinity, in the same read."""
    blobs, tensor_hashes = {}, {}
    for f in scanned.files:
        if f.path == WEIGHTS:
            blobs[f.path], tensor_hashes = hash_file_and_tensors(f.abspath, scanned.header)
        else:
            blobs[f.path] = sha256_file(f.abspath)
    return HashedAdapter(scanned, blobs, tensor_hashes)
