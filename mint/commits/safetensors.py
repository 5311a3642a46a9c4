"""Read a safetensors file's header without trusting it, and index its tensors.

The format: 8 bytes of little-endian header length N, N bytes of JSON, then the data.
Each tensor's `data_offsets` are relative to the data's start. Nothing is unpickled and
nothing is loaded into a framework: this is plain bytes and JSON.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from mint.errors import InvalidSafetensors

DTYPE_SIZES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}
MAX_HEADER = 100 * 1024 * 1024
CHUNK = 4 * 1024 * 1024


@dataclass(frozen=True)
class TensorSpan:
    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute offset in the file
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class SafetensorsHeader:
    header_len: int
    metadata: dict
    tensors: tuple[TensorSpan, ...]
    file_size: int


def read_header(path: str | Path) -> SafetensorsHeader:
    """Parse and check the header: lengths, dtypes, shapes and offsets must all agree."""
    path = Path(path)
    size = os.path.getsize(path)
    bad = lambda why: InvalidSafetensors(path, f"corrupt safetensors: {why}")  # noqa: E731
    if size < 8:
        raise bad("shorter than its 8-byte header length")
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > MAX_HEADER or 8 + n > size:
            raise bad(f"header length {n} runs past the end of the {size}-byte file")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad(f"header is not JSON ({exc.__class__.__name__})") from None
    if not isinstance(header, dict):
        raise bad("header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    data_start, data_len = 8 + n, size - 8 - n
    spans = [_span(name, info, data_start, bad) for name, info in header.items()]
    spans.sort(key=lambda s: s.start)
    cursor = data_start
    for s in spans:
        if s.start != cursor:
            raise bad(
                f"tensor {s.name} starts at {s.start - data_start}, expected {cursor - data_start}"
            )
        cursor = s.end
    if cursor - data_start != data_len:
        raise bad(f"tensors cover {cursor - data_start} bytes but the data holds {data_len}")
    return SafetensorsHeader(n, metadata, tuple(spans), size)


def _span(name: str, info: object, data_start: int, bad) -> TensorSpan:
    if not isinstance(info, dict):
        raise bad(f"entry {name!r} is not an object")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if dtype not in DTYPE_SIZES:
        raise bad(f"tensor {name} has unknown dtype {dtype!r}")
    if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise bad(f"tensor {name} has a malformed shape {shape!r}")
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(isinstance(o, int) and o >= 0 for o in offsets)
        and offsets[0] <= offsets[1]
    ):
        raise bad(f"tensor {name} has malformed data_offsets {offsets!r}")
    expected = math.prod(shape) * DTYPE_SIZES[dtype]
    if offsets[1] - offsets[0] != expected:
        raise bad(
            f"tensor {name} spans {offsets[1] - offsets[0]} bytes but {dtype}{shape} needs "
            f"{expected}"
        )
    return TensorSpan(name, dtype, tuple(shape), data_start + offsets[0], data_start + offsets[1])


def hash_file_and_tensors(
    path: str | Path, header: SafetensorsHeader
) -> tuple[str, dict[str, str]]:
    """One read of the file: its sha256, and the sha256 of each tensor's bytes."""
    whole = hashlib.sha256()
    per = {s.name: hashlib.sha256() for s in header.tensors}
    spans = list(header.tensors)
    i, pos = 0, 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            whole.update(chunk)
            end = pos + len(chunk)
            view = memoryview(chunk)
            while i < len(spans) and spans[i].start < end:
                s = spans[i]
                lo, hi = max(s.start, pos), min(s.end, end)
                if hi > lo:
                    per[s.name].update(view[lo - pos : hi - pos])
                if s.end <= end:
                    i += 1
                else:
                    break
            pos = end
    if pos != header.file_size:
        raise InvalidSafetensors(path, "file changed while it was being read")
    return whole.hexdigest(), {k: h.hexdigest() for k, h in per.items()}


def read_tensor_float(path: str | Path, span_start: int, nbytes: int, dtype: str):
    """A tensor's values as float64 numpy, or None for dtypes without a float view."""
    import numpy as np

    with open(path, "rb") as f:
        f.seek(span_start)
        raw = f.read(nbytes)
    if dtype == "BF16":
        return (
            (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16)
            .view(np.float32)
            .astype(np.float64)
        )
    kinds = {"F16": "<f2", "F32": "<f4", "F64": "<f8"}
    if dtype in kinds:
        return np.frombuffer(raw, dtype=kinds[dtype]).astype(np.float64)
    return None


# Bits that are all ones in the exponent of a non-finite value (NaN or infinity), per dtype.
_NONFINITE = {
    "F64": ("<u8", 0x7FF0000000000000),
    "F32": ("<u4", 0x7F800000),
    "F16": ("<u2", 0x7C00),
    "BF16": ("<u2", 0x7F80),
    "F8_E5M2": ("u1", 0x7C),
}


def check_finite(path: str | Path, header: SafetensorsHeader) -> None:
    """Refuse weights holding NaN or infinity: they would load, and answer garbage.

    Works on the raw bits (exponent all ones), so no dtype is converted; F8_E4M3 has no
    infinity and its NaN is S.1111.111."""
    import numpy as np

    data = np.memmap(path, dtype="u1", mode="r")
    for t in header.tensors:
        raw = data[t.start : t.end]
        if t.dtype == "F8_E4M3":
            bad = np.any((raw & 0x7F) == 0x7F)
        elif t.dtype in _NONFINITE:
            kind, mask = _NONFINITE[t.dtype]
            bits = raw.view(kind)
            bad = np.any((bits & np.array(mask, dtype=kind)) == np.array(mask, dtype=kind))
        else:
            continue
        if bad:
            raise InvalidSafetensors(path, f"tensor {t.name} holds NaN or infinite values")
