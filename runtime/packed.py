"""Staging a set from its pack (`mint.sets.pack`): one read of one verified blob, then slices.

A set whose members are not loaded yet is read from its pack: the whole blob in one read,
hashed against its id (a corrupt pack is removed and rebuilt from the members' verified blobs,
with a log line), then each member's tensors are one copy of its slice of the pack, viewed as
its tensors. No member's safetensors file is opened or parsed. The checks are those of
`load_engine`: set consistency, base fingerprint, every other blob (configs, prompts)
re-hashed, each member fitted against the base; only then is anything injected.

An adapter served alone, and a set that needs at most one member loaded (a new version that
shares the others with the one serving), load as `load_engine` loads them: reading a whole
pack for one member would read more than that member's file.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from mint.objects import SetSpec
from mint.repo import Repo
from mint.runtime.engine import Engine, Verify, check_spec, load_engine, members
from mint.runtime.errors import AdapterLoadError
from mint.runtime.loader import SharedBase, adapter_name
from mint.runtime.router import label_sequences
from mint.sets import pack as packs

log = logging.getLogger("mint.runtime")


def pack_loader(repo: Repo, base: SharedBase, verify: Verify | None) -> Callable:
    """`load(spec)` for a Runtime over a local repository (see `load_packed_engine`)."""

    def load(spec: SetSpec) -> Engine:
        return load_packed_engine(base, spec, repo=repo, verify=verify)

    return load


def load_packed_engine(
    base: SharedBase, spec: SetSpec, *, repo: Repo, verify: Verify | None = None
) -> Engine:
    """Check a set version completely, then load its missing members from the set's pack."""
    wanted = members(spec)
    missing = [cid for cid in wanted if not base.has(adapter_name(cid))]
    if spec.single or len(missing) < 2:
        return load_engine(base, spec, verify=verify)
    check_spec(spec)
    base.check_fingerprint(spec.base_fingerprint, f"set {spec.name} ({spec.id[:12]})")
    pack = packs.read(repo, spec.id)  # verified: one read, hashed; rebuilt when corrupt
    if pack.rebuilt:
        log.info("set %s: pack %s built from its members", spec.id[:12], pack.id[:12])
    held = pack.members()
    for cid in wanted:
        if cid not in held:
            raise AdapterLoadError(cid, f"is not in the pack of set {spec.id[:12]}")
    for blob in sorted(set(spec.blobs) - pack.weights_blobs()):  # configs and prompts
        repo.store.verify(blob)
    label_ids = label_sequences(base.tokenizer, spec.labels)
    names = [adapter_name(cid) for cid in wanted]
    for _ in range(3):  # a concurrent retire may unload a reused adapter; then prepare it too
        prepared = []
        for cid in (c for c in wanted if not base.has(adapter_name(c))):
            state, finite = member_state(pack, held[cid])
            prepared.append(base.prepare_state(wanted[cid], state, owned=True, finite=finite))
        if base.acquire(prepared, names):
            return Engine(base, spec, label_ids)
    raise RuntimeError("adapters kept being unloaded while staging")  # pragma: no cover


def member_state(pack: packs.Pack, member: dict) -> tuple[dict, bool]:
    """One member's tensors (its slice of the pack, read into memory of its own, viewed as each
    tensor), and whether one pass over the whole slice (tensors of one float dtype, and the
    zero padding between them) found every value finite; False leaves the check to
    `prepare_state`."""
    import torch

    dtypes = _dtypes()
    buf = pack.slices[member["commit"]]  # the member's own memory: its tensors are views of it
    if not len(buf):
        raise AdapterLoadError(member["commit"], "its slice of the pack holds no tensor")
    chunk = torch.frombuffer(buf, dtype=torch.uint8)
    state = {}
    for t in member["tensors"]:
        lo = t["offset"] - member["offset"]
        dtype = dtypes.get(t["dtype"])
        if dtype is None:
            raise AdapterLoadError(member["commit"], f"tensor {t['name']} is {t['dtype']}")
        state[t["name"]] = chunk[lo : lo + t["length"]].view(dtype).view(t["shape"])
    kinds = {v.dtype for v in state.values()}
    finite = False
    if len(kinds) == 1 and state:
        (kind,) = kinds
        size = torch.empty((), dtype=kind).element_size()
        if kind.is_floating_point and len(chunk) % size == 0:
            # a NaN or an infinity makes the sum NaN or infinite; a finite sum proves them all
            # finite (one that overflows falls back to the check of each tensor)
            finite = bool(torch.isfinite(chunk.view(kind).sum()))
    return state, finite


def _dtypes() -> dict:
    """safetensors' dtype names -> torch dtypes."""
    import torch

    names = {
        "F64": "float64",
        "F32": "float32",
        "F16": "float16",
        "BF16": "bfloat16",
        "F8_E4M3": "float8_e4m3fn",
        "F8_E5M2": "float8_e5m2",
        "I64": "int64",
        "I32": "int32",
        "I16": "int16",
        "I8": "int8",
        "U8": "uint8",
        "BOOL": "bool",
    }
    return {k: getattr(torch, v) for k, v in names.items() if hasattr(torch, v)}
