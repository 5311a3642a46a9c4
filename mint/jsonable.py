"""One JSON rendering of the API's results, shared by `--json` and the registry server.

Every dataclass field and public property appears under its own name (a trailing underscore
dropped: `from_` is "from"); enums become their values, paths strings.
"""

from __future__ import annotations

import dataclasses
import enum
import os


def to_jsonable(obj):
    """OBJ (dataclasses, enums, containers, paths, plain values) as plain JSON values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {
            f.name.rstrip("_"): to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)
        }
        for name in public_properties(type(obj)):
            out[name] = to_jsonable(getattr(obj, name))
        return out
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    return obj


def public_properties(cls: type) -> list[str]:
    """The public properties of CLS and its bases, base classes' first."""
    return [
        name
        for klass in reversed(cls.__mro__)
        for name, value in vars(klass).items()
        if isinstance(value, property) and not name.startswith("_")
    ]
