"""Signed moves seen from the channels (issue 23): the statement a move would be signed with,
and a channel's history with what each move's signature says (`mint.signing.moves`)."""

from __future__ import annotations

from mint.gates import canary, promotion
from mint.gates.history import history
from mint.repo import Repo
from mint.signing.moves import PLAN, MoveStatement, Planned, SignedMove, verify_moves


def move_statement(repo: Repo, action: str, **move) -> MoveStatement | None:
    """The statement the move ACTION (promote, rollback, canary-start or canary-stop, with
    MOVE: that operation's arguments) would be signed with, planned in a transaction that is
    rolled back, so that nothing moves: what a registry's client signs. None when nothing
    would move."""
    operation = {
        "promote": promotion.promote,
        "rollback": promotion.rollback,
        "canary-start": canary.canary_start,
        "canary-stop": canary.canary_stop,
    }[action]
    try:
        operation(repo, **move, signature=PLAN)
    except Planned as planned:
        return planned.statement
    return None


def history_verify(
    repo: Repo, ref: str, *, n: int | None = None, before: int | None = None
) -> list[SignedMove]:
    """`history` of LINE@CHANNEL, each move with whether it carries a signature, which
    trusted key made it, or why it does not verify."""
    moves = history(repo, ref, n=n, before=before)
    with repo.db.read() as conn:
        return verify_moves(conn, moves)
