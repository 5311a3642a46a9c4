"""A signature policy: whether a commit is signed by a key that a gate or a server accepts.

One judgement, written once over a `verify(commit_id) -> Verification` (NotVerified when no
trusted key signed it): the gate passes `verify_in` in its own transaction (a contract's
`[signature]`), `mint serve --require-signed` and the vLLM plugin pass `api.verify` (on a
registry, against its keys). A commit must carry a signature of its own that verifies with a
trusted key, one of KEYS when KEYS are named. For a set that is the set's own signature, whose
verification also checks each member's signature that it names: a set's own files (its
mol.toml's routing and labels, its prompts) decide what users get, so members signed one by
one never stand in for it (issue 35).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from mint.errors import InvalidConfig, NotVerified
from mint.objects import Verification
from mint.refs.revisions import check_name
from mint.signing.commits import UNSIGNED

Verify = Callable[[str], Verification]

# Why a commit is refused, as a metric's label says it: a small fixed set.
SIGNED, NO_SIGNATURE, NOT_VERIFIED, KEY_NOT_ALLOWED = (
    "signed",
    "unsigned",
    "not_verified",
    "key_not_allowed",
)


@dataclass(frozen=True)
class Verdict:
    """Whether a commit meets the policy: REASON (one of the labels above), WHY in one line
    (who signed it, or why it is refused), and the accepted keys' names."""

    ok: bool
    reason: str
    why: str
    signers: tuple[str, ...] = ()


def parse_keys(value: str | Iterable[str] | None, where: str = "--keys") -> tuple[str, ...]:
    """Key names as a policy takes them (`alice,bob` or a list): each a valid name, sorted,
    each once; () for none (any trusted key)."""
    if value is None:
        return ()
    names = value.split(",") if isinstance(value, str) else list(value)
    out = set()
    for name in names:
        if not isinstance(name, str):
            raise InvalidConfig(f"{where}: key names are strings")
        name = name.strip()
        check_name("key", name)
        out.add(name)
    return tuple(sorted(out))


def judge(verify: Verify, commit: str, keys: Sequence[str] = ()) -> Verdict:
    """The verdict on COMMIT: its own signature (a set's: with the members' it names, as
    VERIFY checks them) by a trusted key among KEYS (any trusted key if none)."""
    try:
        found = verify(commit)
    except NotVerified as exc:
        reason = NO_SIGNATURE if exc.why == UNSIGNED else NOT_VERIFIED
        return Verdict(False, reason, str(exc.why))
    names = sorted({s.key for s in found.signers})
    allowed = tuple(n for n in names if not keys or n in keys)
    if allowed:
        return Verdict(True, SIGNED, f"signed by {', '.join(allowed)}", allowed)
    shown = ", ".join(n or "an unnamed key" for n in names)
    return Verdict(False, KEY_NOT_ALLOWED, f"it is signed by {shown}, not by {' or '.join(keys)}")


def required(keys: Sequence[str]) -> str:
    """What a policy requires, in words (a gate's REQUIRED column)."""
    return f"signed by {' or '.join(keys)}" if keys else "signed by a trusted key"
