"""The CPU tier: set versions that stopped serving stay loaded, least recently used first out.

A version that is swapped out keeps its engine, and so its adapters, in the shared PeftModel.
Serving it again (a rollback) takes it back from the tier: a swap of pointers that reads and
loads nothing. The tier is bounded by how many adapters the base may hold in all
(`max_adapters`, the serving and staged versions' included): past it, the least recently
used versions that no request holds are closed, which unloads the adapters only they used.
The serving and staged versions are never evicted, so they alone may exceed the bound.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

from mint.runtime.engine import Engine


class Slot:
    """An engine with its count of requests in flight and whether it stopped serving."""

    def __init__(self, engine: Engine, stage_seconds: float = 0.0):
        self.engine = engine
        self.stage_seconds = stage_seconds
        self.leases = 0
        self.retired = False
        self.from_tier = False  # staged again from the CPU tier, with nothing loaded


class Tier:
    """Retired versions by set commit id, least recently used first. Not thread-safe: the
    runtime calls it under its lock."""

    def __init__(self, max_adapters: int):
        if max_adapters < 0:
            raise ValueError("max_adapters must be >= 0")
        self.max_adapters = max_adapters
        self._slots: OrderedDict[str, Slot] = OrderedDict()
        self._spare: list[Slot] = []  # displaced engines of a version already resident

    def keep(self, slot: Slot) -> None:
        """Hold a version that stopped serving, as the most recently used."""
        slot.retired = True
        displaced = self._slots.pop(slot.engine.id, None)
        if displaced is not None:  # the same version staged twice: keep one engine of it
            self._spare.append(displaced)
        self._slots[slot.engine.id] = slot

    def discard(self, slot: Slot) -> None:
        """Hold a retired engine only until no request uses it (its version serves on)."""
        slot.retired = True
        self._spare.append(slot)

    def take(self, set_id: str) -> Slot | None:
        """Take a version back to serve it (None when it is not resident)."""
        slot = self._slots.pop(set_id, None)
        if slot is not None:
            slot.retired = False
        return slot

    def get(self, set_id: str) -> Slot | None:
        return self._slots.get(set_id)

    def slots(self) -> list[Slot]:
        """Every slot held, displaced ones included."""
        return self._spare + list(self._slots.values())

    def ids(self) -> list[str]:
        """Resident set commit ids, least recently used first."""
        return list(self._slots)

    def victims(self, loaded: Mapping[str, int]) -> list[Slot]:
        """Remove and return the versions to close so that at most `max_adapters` adapters stay
        loaded. `loaded` maps adapter name to the number of engines using it (the base's
        table); versions still held by requests are skipped."""
        refs = dict(loaded)
        count = sum(1 for n in refs.values() if n > 0)
        chosen: list[Slot] = []

        def drop(slot: Slot) -> None:
            nonlocal count
            chosen.append(slot)
            for name in slot.engine.adapter_names():
                refs[name] = refs.get(name, 0) - 1
                count -= refs[name] == 0

        for slot in [s for s in self._spare if not s.leases]:
            drop(slot)
        self._spare = [s for s in self._spare if s.leases]
        for set_id, slot in list(self._slots.items()):
            if count <= self.max_adapters:
                break
            if not slot.leases:
                del self._slots[set_id]
                drop(slot)
        return chosen


class Lease:
    """One request's hold on an engine; `release()` (or leaving the `with`) ends it."""

    def __init__(self, runtime, slot: Slot, variant: str = "production"):  # runtime: Runtime
        self._runtime, self._slot = runtime, slot
        self.engine: Engine = slot.engine
        self.variant = variant  # what the trace calls it: the channel's name, or canary
        self._done = False

    def release(self) -> None:
        if not self._done:
            self._done = True
            self._runtime._release(self._slot)

    def __enter__(self) -> Engine:
        return self.engine

    def __exit__(self, *exc) -> None:
        self.release()
