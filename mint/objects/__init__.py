"""What the API returns: frozen dataclasses. The CLI renders them; `--json` prints every field.

Each class becomes a dataclass when it is first used, through this module's `__getattr__`
(PEP 562): building a frozen dataclass compiles its methods, about 0.4 ms a class, and a
command uses a few of these 39 (`mint log` eleven, issue 24). The classes are written in
the modules of their concept (`_commits`, `_gates`, `_loop`, `_signing`) but are this
module's: `mint.objects.X` is their name (their `__module__`, for pickle and repr), and one
object however it is reached (`from mint.objects import X`, `mint.objects.X`, pickle). Import
them from here only: in those modules they are plain classes until first asked for here.
"""

from __future__ import annotations

# The names the classes' annotations use: `typing.get_type_hints` looks them up here.
from mint.ids import (  # noqa: F401
    Action,
    CanaryOutcome,
    CommitId,
    ContractId,
    EvalSource,
    Kind,
    RefKind,
    Role,
)
from mint.objects import _commits, _fleet, _gates, _lazy, _loop, _proposals, _signing  # noqa: F401

__all__ = sorted(_lazy.PENDING)


def __getattr__(name: str) -> type:
    with _lazy.LOCK:
        if name in globals():  # made by another thread while this one waited
            return globals()[name]
        if name not in _lazy.PENDING:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return _lazy.make(globals(), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
