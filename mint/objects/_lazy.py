"""The machinery of `mint.objects`: classes defined plain, made frozen dataclasses on first use."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import dataclass_transform

PENDING: dict[str, type] = {}  # name -> a class defined, not yet made a dataclass
LOCK = threading.RLock()  # a registry's threads may ask for the same class at once
_NAME = re.compile(r"[A-Za-z_]\w*")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def frozen(cls: type) -> type:
    """`@dataclass(frozen=True)`, applied when `mint.objects` is first asked for the class.

    The class is `mint.objects`'s (its `__module__`): pickle, repr and `typing.get_type_hints`
    look for it, and for the names its annotations use, there."""
    cls.__module__ = "mint.objects"
    PENDING[cls.__name__] = cls
    return cls


def make(namespace: dict, name: str) -> type:
    """The class NAME made a dataclass and put in NAMESPACE (`mint.objects`'s), with every
    class its annotations name: `typing.get_type_hints` looks them up in that namespace."""
    cls = dataclass(frozen=True)(PENDING.pop(name))
    namespace[name] = cls
    for word in _NAME.findall(" ".join(map(str, cls.__annotations__.values()))):
        if word in PENDING:
            make(namespace, word)
    return cls
