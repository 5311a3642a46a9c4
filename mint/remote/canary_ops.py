"""Canaries on a registry: the same operations, signatures and results as `mint.gates.canary`.

The registry records the token's identity as who started or stopped a canary, so `by=` is
not sent. A server following a registry channel polls `canary_of` on each nudge.
"""

from __future__ import annotations

from mint.exchange.wire import decode
from mint.ids import CanaryOutcome
from mint.objects import Canary, CanaryStatus
from mint.remote.repo import RemoteRepo
from mint.remote.signed_moves import signed_move


def canary_of(repo: RemoteRepo, rev: str) -> Canary | None:
    """The open canary of REV (LINE@CHANNEL), or None: none is open, or REV names no channel."""
    line, _, channel = rev.partition("@")
    if not line or not channel:
        return None
    found = repo.client.get("/canary", ref=rev)
    return decode(Canary, found) if found is not None else None


def canary_start(
    repo: RemoteRepo,
    ref: str,
    candidate: str,
    fraction: float,
    *,
    by: str,
    reason: str | None = None,
    contract: str | None = None,
    force: bool = False,
    sign: str | None = None,
    password: str | None = None,
) -> Canary:
    """Serve CANDIDATE to FRACTION of LINE@CHANNEL's requests, beside the channel's holder,
    if the registry's gate for the channel passes (or with FORCE and a REASON; forcing a
    protected channel needs admin). With SIGN, signed here with that private key (which is
    never sent: `mint.remote.signed_moves`)."""
    from mint.gates.canary import check_fraction  # the same words as locally, before sending
    from mint.gates.checks import check_forced

    fraction = check_fraction(fraction)
    check_forced(force, reason, ref.partition("@")[2] or ref)
    body = {"ref": ref, "candidate": candidate, "fraction": fraction, "reason": reason}
    if contract is not None or force:  # sent only when given: an older registry takes the rest
        body |= {"contract": contract, "force": force}
    if sign is not None:
        channel = ref.partition("@")[2]
        return signed_move(repo, "/canary/start", body, channel, sign, password, Canary)
    return decode(Canary, repo.client.post("/canary/start", body))


def canary_stop(
    repo: RemoteRepo,
    ref: str,
    *,
    by: str,
    reason: str | None = None,
    outcome: str = CanaryOutcome.STOPPED,
    sign: str | None = None,
    password: str | None = None,
) -> Canary:
    """Stop LINE@CHANNEL's open canary; OUTCOME says whether its candidate was promoted.
    With SIGN, signed here as `canary_start` is."""
    body = {"ref": ref, "reason": reason, "outcome": str(outcome)}
    if sign is not None:
        channel = ref.partition("@")[2]
        return signed_move(repo, "/canary/stop", body, channel, sign, password, Canary)
    return decode(Canary, repo.client.post("/canary/stop", body))


def canary_status(repo: RemoteRepo, ref: str, contract: str | None = None) -> CanaryStatus:
    """LINE@CHANNEL's open canary (else its latest) with live feedback on both variants,
    weighed and judged under CONTRACT's [live] table (else the defaults)."""
    query = {"ref": ref} | ({"contract": contract} if contract is not None else {})
    return decode(CanaryStatus, repo.client.get("/canary/status", **query))
