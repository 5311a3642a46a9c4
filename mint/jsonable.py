"""One JSON rendering of the API's results, shared by `--json` and the registry server.

Every dataclass field and public property appears under its own name (a trailing underscore
dropped: `from_` is "from"); enums become their values, paths strings.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import os

_PLAIN = (str, int, float, bool, type(None))


def to_jsonable(obj):
    """OBJ (dataclasses, enums, containers, paths, plain values) as plain JSON values."""
    if isinstance(obj, _PLAIN) and not isinstance(obj, enum.Enum):
        return obj
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {key: to_jsonable(getattr(obj, attr)) for attr, key in _layout(type(obj))}
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    return obj


@functools.cache
def _layout(cls: type) -> tuple[tuple[str, str], ...]:
    """(attribute, JSON key) of every field and public property of the dataclass CLS."""
    fields = tuple((f.name, f.name.rstrip("_")) for f in dataclasses.fields(cls))
    return fields + tuple((name, name) for name in public_properties(cls))


def public_properties(cls: type) -> list[str]:
    """The public properties of CLS and its bases, base classes' first."""
    return [
        name
        for klass in reversed(cls.__mro__)
        for name, value in vars(klass).items()
        if isinstance(value, property) and not name.startswith("_")
    ]
