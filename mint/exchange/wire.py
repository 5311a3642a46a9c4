"""The one wire format: objects into the JSON the registry and its clients exchange, and back.

Results travel as `mint.jsonable.to_jsonable` renders them (each field under its own name,
`from_` as "from", public properties added); `decode` is its inverse, driven by the
dataclass's own type hints, so a field added to `mint.objects` needs no change here.

Commits travel in one form, `commit_wire`, whose keys are `COMMIT_KEYS`; a push and a fetch
write it here and `mint.exchange.arriving.new_commit` checks it on the way in. Blobs travel
many to a request as a pack: `pack_header`, then their bytes (read by `mint.registry.upload`).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import types
import typing
from typing import TYPE_CHECKING, Any

from mint.errors import InvalidObject

if TYPE_CHECKING:
    from mint.commits.rows import NewCommit
    from mint.objects import CommitDetail


def decode(cls: type, data: Any) -> Any:
    """DATA (plain JSON) as an instance of the dataclass CLS; unknown keys are ignored."""
    if not isinstance(data, dict):
        raise InvalidObject(f"the registry sent {type(data).__name__} for a {cls.__name__}")
    hints = _hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        key = f.name.rstrip("_")
        if key in data:
            values[f.name] = _convert(hints[f.name], data[key])
    try:
        return cls(**values)
    except TypeError as exc:
        raise InvalidObject(f"the registry sent an incomplete {cls.__name__}: {exc}") from None


def decode_list(cls: type, data: Any) -> list:
    if not isinstance(data, list):
        what = type(data).__name__
        raise InvalidObject(f"the registry sent {what} for a list of {cls.__name__}")
    return [decode(cls, item) for item in data]


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _convert(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        return _convert(kinds[0], value) if len(kinds) == 1 else value
    if origin is list:
        return [_convert(args[0], v) for v in value] if args else list(value)
    if origin is dict:
        return {k: _convert(args[1], v) for k, v in value.items()} if args else dict(value)
    if hasattr(tp, "__supertype__"):  # a NewType such as CommitId
        return _convert(tp.__supertype__, value)
    if dataclasses.is_dataclass(tp):
        return decode(tp, value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    return value


# --- commits ----------------------------------------------------------------------------

COMMIT_KEYS = frozenset(
    {
        "id",
        "kind",
        "line",
        "parents",
        "files",
        "base",
        "base_fingerprint",
        "message",
        "author",
        "created_at",
        "meta",
        "provenance",
        "peft",
        "config",
        "tensors",
        "members",
    }
)
TENSOR_FIELDS = ("name", "dtype", "shape", "sha256", "nbytes", "file", "offset")
MEMBER_FIELDS = ("role", "label", "commit", "requested")


def commit_wire(c: NewCommit | CommitDetail) -> dict:
    """Commit C (one about to be sent, or one read back) in wire form: its fields and its id.

    Files are `[sha256, size]`, tensors `TENSOR_FIELDS` and members `MEMBER_FIELDS` as lists.
    """
    return {
        "id": c.id,
        "kind": str(c.kind),
        "line": c.line,
        "parents": list(c.parents),
        "files": {p: [f.sha256, f.size] for p, f in c.files.items()},
        "base": c.base,
        "base_fingerprint": c.base_fingerprint,
        "message": c.message,
        "author": c.author,
        "created_at": c.created_at,
        "meta": c.meta,
        "provenance": c.provenance,
        "peft": c.peft,
        "config": c.config,
        "tensors": [
            [t.name, t.dtype, list(t.shape), t.sha256, t.nbytes, t.file, t.offset]
            for t in c.tensors
        ],
        "members": [[str(m.role), m.label, m.commit_id, m.requested] for m in c.members],
    }


# --- blob packs -------------------------------------------------------------------------

PACK_TYPE = "application/x-mint-pack"


def pack_header(blobs: list[tuple[str, int]]) -> bytes:
    """The first line of a pack of BLOBS ((id, size) each): JSON `{"blobs": [[id, size], ...]}`
    and a newline; each blob's bytes follow it in that order, nothing between them."""
    header = {"blobs": [[blob_id, size] for blob_id, size in blobs]}
    return json.dumps(header, separators=(",", ":")).encode() + b"\n"
