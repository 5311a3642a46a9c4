"""The canary split: which requests a canary's candidate serves, beside the channel's holder.

A request that names a `user` goes to the canary iff `sha256("CANARY_ID:USER")`, read as a
number, mod 10^6 is below `fraction`·10^6: the same user always lands on the same side for
as long as the canary runs, and a new canary draws its users afresh. A request without a
user is sent by a random draw with the same probability.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mint.runtime.residency import Slot

CANARY = "canary"  # the variant of the turns a canary serves
SCALE = 10**6


def bucket(user: str, canary_id: int | str) -> int:
    """USER's place in [0, 10^6) for one canary."""
    digest = hashlib.sha256(f"{canary_id}:{user}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % SCALE


def to_canary(
    user: str | None,
    canary_id: int | str,
    fraction: float,
    draw: Callable[[], float] = random.random,
) -> bool:
    """Whether a request goes to the canary (sticky per USER; a random draw without one)."""
    if user is None:
        return draw() < fraction
    return bucket(user, canary_id) < round(fraction * SCALE)


@dataclass
class Split:
    """An open canary as the runtime serves it: the canary's row and its loaded version."""

    canary: Any  # mint.objects.Canary: id, candidate, fraction, ...
    slot: Slot

    @property
    def key(self) -> tuple[int, str]:
        return self.canary.id, self.canary.candidate

    def takes(self, user: str | None) -> bool:
        return to_canary(user, self.canary.id, self.canary.fraction)


def split_lines(where: str, old: Split | None, canary, holder: str, why: str) -> list[str]:
    """The server's log lines for a split that changed: the old canary's stop (the candidate,
    its fraction, WHY, or the canary that replaced it) and the new one's start."""
    lines = []
    if old is not None:
        c = old.canary
        stop = why if canary is None else f"replaced by canary {canary.candidate[:12]}"
        lines.append(
            f"canary stop {where}: candidate {c.candidate[:12]} at {c.fraction:g}: {stop}"
        )
    if canary is not None:
        lines.append(
            f"canary start {where}: candidate {canary.candidate[:12]} at {canary.fraction:g} "
            f"beside {holder}"
        )
    return lines
