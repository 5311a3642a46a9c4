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
    raw: bytes = b""  # the file's first 8 + header_len bytes, as parsed


def read_header(path: str | Path) -> SafetensorsHeader:
    """Parse and check the header: lengths, dtypes, shapes and offsets must all agree."""
    path = Path(path)
    size = os.path.getsize(path)
    return parse_header(read_prefix(path, size), size, path)


def read_prefix(path: str | Path, size: int) -> bytes:
    """The first 8 + N bytes of the file (N: the header's length), checked against SIZE."""
    if size < 8:
        raise _bad(path, "shorter than its 8-byte header length")
    with open(path, "rb") as f:
        first = f.read(8)
        (n,) = struct.unpack("<Q", first)
        if n > MAX_HEADER or 8 + n > size:
            raise _bad(path, f"header length {n} runs past the end of the {size}-byte file")
        return first + f.read(n)


def _bad(path, why: str) -> InvalidSafetensors:
    return InvalidSafetensors(path, f"corrupt safetensors: {why}")


def parse_header(raw: bytes, size: int, path: str | Path) -> SafetensorsHeader:
    """The header in RAW (what `read_prefix` read) of a SIZE-byte file, checked."""
    bad = lambda why: _bad(path, why)  # noqa: E731
    (n,) = struct.unpack("<Q", raw[:8])
    if len(raw) != 8 + n or 8 + n > size:
        raise bad(f"header length {n} runs past the end of the {size}-byte file")
    try:
        header = json.loads(raw[8:].decode("utf-8"))
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
    return SafetensorsHeader(n, metadata, tuple(spans), size, bytes(raw))


def _span(name: str, info: object, data_start: int, bad) -> TensorSpan:
    if not isinstance(info, dict):
        raise bad(f"entry {name!r} is not an object")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if dtype not in DTYPE_SIZES:
        raise bad(f"tensor {name} has unknown dtype {dtype!r}")
    if not _naturals(shape):
        raise bad(f"tensor {name} has a malformed shape {shape!r}")
    if not (_naturals(offsets) and len(offsets) == 2 and offsets[0] <= offsets[1]):
        raise bad(f"tensor {name} has malformed data_offsets {offsets!r}")
    expected = math.prod(shape) * DTYPE_SIZES[dtype]
    if offsets[1] - offsets[0] != expected:
        raise bad(
            f"tensor {name} spans {offsets[1] - offsets[0]} bytes but {dtype}{shape} needs "
            f"{expected}"
        )
    return TensorSpan(name, dtype, tuple(shape), data_start + offsets[0], data_start + offsets[1])


def _naturals(value: object) -> bool:
    """A JSON list of integers >= 0 (a header holds hundreds: this runs once per tensor)."""
    if not isinstance(value, list):
        return False
    for x in value:
        if not isinstance(x, int) or x < 0:
            return False
    return True


def hash_file_and_tensors(
    path: str | Path, header: SafetensorsHeader
) -> tuple[str, dict[str, str]]:
    """One read of the file: its sha256, and the sha256 of each tensor's bytes; weights that
    hold NaN or infinity are refused on the way (InvalidSafetensors)."""
    whole, tensors = hashlib.sha256(), TensorPass(path, header)
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            whole.update(chunk)
            tensors.update(chunk)
            size += len(chunk)
    return whole.hexdigest(), tensors.finish(size)


class TensorPass:
    """The per-tensor half of one pass over a safetensors file.

    Fed the file's bytes in order (`update`), it hashes each tensor, refuses NaN and infinity,
    and checks that the header it reads is the one that was parsed; `finish` then checks the
    size and returns the tensor hashes. A value split between two chunks is carried over."""

    def __init__(self, path: str | Path, header: SafetensorsHeader, check_values: bool = True):
        self.path, self.header, self.check_values = path, header, check_values
        self.spans = header.tensors  # sorted by start, contiguous
        self.hashes = {s.name: hashlib.sha256() for s in self.spans}
        self.i = self.pos = 0
        self.carry = b""  # the start of a value cut by a chunk's end

    def update(self, chunk: bytes) -> None:
        pos, end, view = self.pos, self.pos + len(chunk), memoryview(chunk)
        if pos < len(self.header.raw):
            n = min(len(self.header.raw), end) - pos
            if view[:n] != self.header.raw[pos : pos + n]:
                raise self._changed()
        while self.i < len(self.spans) and self.spans[self.i].start < end:
            s = self.spans[self.i]
            lo, hi = max(s.start, pos), min(s.end, end)
            if hi > lo:
                self.hashes[s.name].update(view[lo - pos : hi - pos])
                if self.check_values:  # else the caller runs `check_finite` on what it wrote
                    self._check_values(s, view[lo - pos : hi - pos])
            if s.end > end:
                break
            self.i += 1
        self.pos = end

    def finish(self, size: int) -> dict[str, str]:
        """The tensor hashes, once the whole file (SIZE bytes) went through `update`."""
        if size != self.pos or size != self.header.file_size:
            raise self._changed()
        return {name: h.hexdigest() for name, h in self.hashes.items()}

    def _changed(self) -> InvalidSafetensors:
        return InvalidSafetensors(self.path, "file changed while it was being read")

    def _check_values(self, span: TensorSpan, part: memoryview) -> None:
        width = _VALUE_BYTES.get(span.dtype)
        if width is None:
            return
        if self.carry:
            need = width - len(self.carry)
            joined, part = self.carry + bytes(part[:need]), part[need:]
            self.carry = b"" if len(joined) == width else joined
            if not self.carry and _has_nonfinite(joined, span.dtype):
                raise _nonfinite(self.path, span.name)
            if self.carry:
                return
        whole = len(part) - len(part) % width
        if whole and _has_nonfinite(part[:whole], span.dtype):
            raise _nonfinite(self.path, span.name)
        self.carry = bytes(part[whole:])


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


_VALUE_BYTES = {dtype: DTYPE_SIZES[dtype] for dtype in (*_NONFINITE, "F8_E4M3")}


def _nonfinite(path, name: str) -> InvalidSafetensors:
    return InvalidSafetensors(path, f"tensor {name} holds NaN or infinite values")


def _has_nonfinite(data, dtype: str) -> bool:
    """Whether the raw values hold NaN or infinity, from their bits, so no dtype is converted:
    without its sign, a value is NaN or infinite when its bits reach all-ones in the exponent
    (F8_E4M3 has no infinity, and its NaN is S.1111.111). One mask and one max per slice."""
    import numpy as np

    kind, least = _NONFINITE.get(dtype, ("u1", 0x7F))  # F8_E4M3
    bits = np.frombuffer(data, dtype=kind)
    if not bits.size:
        return False
    unsigned = np.bitwise_and(bits, np.array((1 << (8 * bits.itemsize - 1)) - 1, dtype=kind))
    return bool(unsigned.max() >= least)


def check_finite(path: str | Path, header: SafetensorsHeader) -> None:
    """Refuse weights holding NaN or infinity: they would load, and answer garbage."""
    import numpy as np

    data = np.memmap(path, dtype="u1", mode="r")
    for t in header.tensors:
        if t.dtype in _VALUE_BYTES and t.end > t.start:
            if _has_nonfinite(data[t.start : t.end], t.dtype):
                raise _nonfinite(path, t.name)
