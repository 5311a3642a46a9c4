"""Signed moves through a registry (issue 23): the key stays on this machine.

The registry plans the move (`POST /promote/statement`, `/rollback/statement`: the statement
of the move it would make now, nothing moved); this client checks that it is the move asked
for, signs it here, and sends the bundle with the move, which the registry checks against
the move it makes, under the channel's compare-and-swap. If the channel moved in between,
the statement names another move and is refused (409): planned and signed again, a few times.
"""

from __future__ import annotations

from mint.errors import InvalidObject, MoveStatementMismatch
from mint.exchange.wire import decode, decode_list
from mint.objects import Move
from mint.remote.repo import RemoteRepo
from mint.signing.bundle import load_private_key
from mint.signing.moves import MoveStatement, SignedMove, sign_statement

ATTEMPTS = 3


def signed_move(
    repo: RemoteRepo,
    path: str,
    body: dict,
    channel: str,
    sign,
    password: str | None,
    result: type = Move,
):
    """The move PATH (/promote, /rollback, /canary/start or /canary/stop) with BODY, signed
    here with the key in file SIGN (PASSWORD) over the statement the registry plans for it;
    its answer as a RESULT."""
    key = load_private_key(sign, password)  # a wrong key fails before any request
    rev = body.get("rev") or body.get("to") or body.get("candidate")
    for attempt in range(ATTEMPTS):
        planned = repo.client.post(f"{path}/statement", body)
        if planned is None:  # nothing would move: the channel holds it already
            return decode(result, repo.client.post(path, body))
        statement = decode(MoveStatement, planned)
        if not _asked(statement, path, channel, rev, body.get("fraction")):
            raise InvalidObject("the registry planned another move than the one asked for")
        bundle = sign_statement(statement, key)
        try:
            signed = {**body, "signature": bundle.decode()}
            return decode(result, repo.client.post(path, signed))
        except MoveStatementMismatch as exc:  # moved since it was planned: plan, sign again
            if not any(f"it names {word} " in str(exc) for word in _RACING):
                raise  # another line, channel, commit or actor: no race, and no retry
            if attempt == ATTEMPTS - 1:
                ref = f"{statement.line}@{statement.channel}"
                raise MoveStatementMismatch(
                    ref, f"{RACED} {ATTEMPTS} times; nothing moved"
                ) from None
    raise AssertionError("unreachable")


RACED = "the channel moved while this move was being signed"
# What another move (or a gate's new evidence) between the plan and the move changes.
_RACING = ("history entry", "from commit", "contract", "evaluations")


_ACTIONS = {
    "/promote": ("promote", "force"),
    "/rollback": ("rollback",),
    "/canary/start": ("canary-start",),
    "/canary/stop": ("canary-stop",),
}
_HEX = frozenset("0123456789abcdef")


def _asked(st: MoveStatement, path: str, channel: str, rev: str | None, fraction=None) -> bool:
    """Whether the planned statement ST is the move asked for, as far as this client can
    tell: its channel and action, a canary's FRACTION, and the commit it moves to when REV is
    a commit id (or a prefix of one). What this client signs, it checked."""
    if st.channel != channel or st.action not in _ACTIONS[path]:
        return False
    if fraction is not None and st.fraction != fraction:
        return False
    if rev and len(rev) >= 7 and set(rev) <= _HEX:
        return (st.to or "").startswith(rev)
    return True


def history_verify(
    repo: RemoteRepo, ref: str, *, n: int | None = None, before: int | None = None
) -> list[SignedMove]:
    """Moves of LINE@CHANNEL with what each signature says, against the registry's keys."""
    return decode_list(
        SignedMove, repo.client.get("/history/verified", ref=ref, n=n, before=before)
    )
