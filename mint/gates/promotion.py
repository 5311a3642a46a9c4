"""Promotion and rollback: the only ways a channel moves.

A move goes through the refs container's compare-and-swap; the evidence it rests on (the
contract version, the evaluations, the reason, and the entry a rollback would restore) is
written beside the move, on the history row the container returns. The current holder's row
links `back` to the row it replaced, so a rollback is one lookup however long the history is.
"""

from __future__ import annotations

import dataclasses

import sqlalchemy as sa

from mint import schema as s
from mint.db import insert_new
from mint.errors import (
    CanaryOpen,
    ChannelGuarded,
    GateRefused,
    NothingToRollBack,
    RefConflict,
    RevisionNotFound,
)
from mint.faults import crash_point
from mint.gates import reads
from mint.gates.checks import (
    channel_holder,
    check_forced,
    gate_report,
    gate_rows,
    has_held,
    metric_checks,
)
from mint.gates.contracts import contract_row
from mint.gates.evaluations import latest_evaluation_any_version
from mint.gates.history import move_of
from mint.ids import Action, CanaryOutcome, CommitId, RefKind, iso, utcnow
from mint.objects import Approval, Evaluation, GateReport, Move
from mint.refs import Ref, RefsContainer, check_name, check_text, is_hex_prefix, resolve
from mint.refs.channel_names import (
    check_channel_kind,
    check_channel_name,
    check_new_channel,
    guard_of,
)
from mint.refs.revisions import check_local_ref, line_of, near_refs
from mint.repo import Repo
from mint.signing.moves import settle, signing_of

PROMOTE_ATTEMPTS = 20


def _target(conn, rev: str, channel: str) -> tuple[str, str]:
    check_name("channel", channel)
    cid = resolve(conn, rev).id
    line = line_of(conn, cid)
    check_channel_name(conn, line, channel)
    return cid, line


def gate(repo: Repo, rev: str, channel: str, contract: str | None = None) -> GateReport:
    """A dry run of promote: the table, and whether the gate would let REV in."""
    with repo.db.read() as conn:
        cid, line = _target(conn, rev, channel)
        return gate_report(conn, cid, line, channel, contract)


def evaluation_checks(repo: Repo, ev: Evaluation) -> Evaluation:
    """Attach the per-metric table for the contract's channel on the commit's line."""
    with repo.db.read() as conn:
        row = contract_row(conn, ev.contract_id)
        line = line_of(conn, ev.commit_id)
        holder = channel_holder(conn, line, row.channel)
        prev = latest_evaluation_any_version(conn, holder, row.name, row.scope) if holder else None
        checks = metric_checks(row.body, ev.metrics, prev.metrics if prev else None, holder)
    return dataclasses.replace(ev, checks=checks)


# --- moves ---------------------------------------------------------------------


def promote(
    repo: Repo,
    rev: str,
    channel: str,
    *,
    by: str,
    contract: str | None = None,
    force: bool = False,
    reason: str | None = None,
    create: bool = False,
    sign: str | None = None,
    password: str | None = None,
    signature: str | None = None,
) -> Move:
    """Move LINE@CHANNEL to REV if the gate passes (or with force and a reason). Creating a
    channel a typo's distance from a known one needs CREATE (ChannelTypo otherwise). The
    move is signed with the private key in file SIGN (PASSWORD), or carries SIGNATURE, a
    bundle made elsewhere; either is checked against the move (`mint.signing.moves`)."""
    check_forced(force, reason, channel)
    check_text("reason", reason)
    signing = signing_of(sign, password, signature)
    for _ in range(PROMOTE_ATTEMPTS):
        try:
            return _promote_once(repo, rev, channel, contract, force, reason, by, create, signing)
        except RefConflict:
            continue  # someone moved the channel: check the gate again against the new holder
    raise RefConflict(f"channel {channel}", None, None)


def _promote_once(repo, rev, channel, contract, force, reason, by, create, signing) -> Move:
    with repo.db.write() as conn:
        check_name("channel", channel)
        cid, line, current, signed = _candidate(conn, rev, channel)
        check_channel_kind(line, channel, current.kind if current else None)  # not a tag's
        if current is not None and current.target == cid:
            return move_of(conn, current.entry)  # already there: nothing moves or is logged
        if current is None and not create:
            check_new_channel(conn, line, channel)  # `prodution` is refused, not created
        holder = current.target if current else None  # the gate compares with it: read once
        report, applied = gate_rows(conn, cid, line, channel, contract, holder)
        if not report.ok and not force:
            raise GateRefused(report)
        action = Action.FORCE if (force and not report.ok) else Action.PROMOTE
        evidence = _evidence(report, applied, reason, back=current.entry if current else None)
        move = _move(RefsContainer(conn), current, line, channel, cid, by, action, evidence)
        move = _canary_ends(conn, move)
        crash_point("promote.in-transaction")
        settle(conn, move, signing, signed=signed)
    crash_point("promote.after-transaction")
    if action == Action.FORCE:  # what the force overrode, said where it was done
        return dataclasses.replace(move, overridden=[c for c in report.checks if not c.ok])
    return move


def _canary_ends(conn, move: Move) -> Move:
    """Stop the channel's open canary in the move's transaction: it was started beside the
    holder just replaced, so its numbers compare with a set that no longer serves. Promoted
    when MOVE brings its candidate in, else stopped; the Move names the canary."""
    from mint.gates.canary import open_row, stop_open  # here: canaries build on promotion's moves

    found = open_row(conn, move.line, move.channel)
    if found is None:
        return move
    if found.candidate == move.to:
        outcome = CanaryOutcome.PROMOTED
        why = f"the {move.action} by {move.by} brought it into {move.channel}"
    else:
        outcome = CanaryOutcome.STOPPED
        why = (
            f"the {move.action} by {move.by} moved {move.channel} to {(move.to or '-')[:12]}: "
            f"the canary's baseline {found.baseline[:12]} no longer holds it"
        )
    stopped = stop_open(conn, move.line, move.channel, by=move.by, outcome=outcome, reason=why)
    return dataclasses.replace(move, stopped_canary=stopped.id) if stopped else move


def _candidate(conn, rev: str, channel: str) -> tuple[str, str, Ref | None, bool]:
    """What a promote of REV to CHANNEL starts from, read in its transaction: the commit REV
    names, its line, LINE@CHANNEL's ref (None: no such ref yet) and whether the channel moves
    only when signed. One query when REV is a commit id or a hex prefix that names no line
    (as the resolver would find it), else the resolver's queries and one more."""
    found = reads.candidate_by_prefix(conn, rev, channel) if is_hex_prefix(rev) else None
    if found is None:
        cid = resolve(conn, rev).id
        found = reads.candidate(conn, cid, channel)
        if found is None:
            raise RevisionNotFound(cid, "no such commit")
    return found


def _move(refs: RefsContainer, current: Ref | None, line, channel, cid, by, action, evidence):
    """Move LINE@CHANNEL from CURRENT to CID (compare-and-swap), its EVIDENCE written on the
    history row by the same insert; the Move as that row holds it (not read back)."""
    at = utcnow()
    entry = refs.set_if_equals(
        line,
        channel,
        current,
        cid,
        kind=RefKind.CHANNEL,
        by=by,
        action=action,
        at=at,
        evidence=evidence,
    )
    old = current.target if current else None
    ev = evidence["evaluations"] or []
    return Move(
        entry,
        iso(at),
        action,
        line,
        channel,
        old,
        cid,
        by,
        evidence["reason"],
        evidence["contract"],
        ev,
    )


def _evidence(report: GateReport | None, applied: list, reason, *, back) -> dict:
    """What a move rests on, written beside it: the id of the (first) contract version the
    gate applied (APPLIED: its contracts rows, as `gate_rows` returns them), evaluations,
    reason, back."""
    contract = applied[0].id if report and applied else None
    evaluations = report.evaluations if report else []
    return dict(contract=contract, evaluations=evaluations, reason=reason, back=back)


def rollback(
    repo: Repo,
    ref: str,
    *,
    by: str,
    to: str | None = None,
    reason: str | None = None,
    sign: str | None = None,
    password: str | None = None,
    signature: str | None = None,
) -> Move:
    """Move LINE@CHANNEL back to the holder before the current one, or to REV; signed as
    `promote` signs."""
    line, _, channel = ref.partition("@")
    if not line or not channel:
        raise RevisionNotFound(ref, "expected LINE@CHANNEL")
    check_local_ref("channel", channel)
    check_text("reason", reason)
    signing = signing_of(sign, password, signature)
    with repo.db.write() as conn:
        refs = RefsContainer(conn)
        current, replaced, signed = reads.channel_state(conn, line, channel)
        if current is None or current.kind != RefKind.CHANNEL:
            raise RevisionNotFound(
                ref, "unknown channel", near_refs(conn, line, channel, RefKind.CHANNEL)
            )
        if to is not None:
            move = _rollback_to(conn, refs, current, to, by, reason)
        else:
            move = _rollback_once(conn, refs, current, replaced, by, reason)
        move = _canary_ends(conn, move)
        settle(conn, move, signing, signed=signed)
        crash_point("rollback.in-transaction")
    crash_point("rollback.after-transaction")
    return move


def _rollback_once(conn, refs: RefsContainer, current: Ref, target, by, reason) -> Move:
    """Back to the holder that the current one replaced (TARGET: its history row)."""
    line, channel = current.line, current.name
    if target is None:
        raise NothingToRollBack(f"{line}@{channel}", _holders(conn, line, channel))
    evidence = dict(contract=target.contract, evaluations=target.evaluations, reason=reason)
    evidence["back"] = target.back
    return _move(refs, current, line, channel, target.new, by, Action.ROLLBACK, evidence)


def _rollback_to(conn, refs: RefsContainer, current: Ref, rev, by, reason) -> Move:
    line, channel = current.line, current.name
    cid = resolve(conn, rev).id
    if line_of(conn, cid) != line:
        raise RevisionNotFound(rev, f"not a commit of line {line}")
    report, applied = None, []
    if not has_held(conn, cid, line, channel):  # a newcomer goes through the gate
        report, applied = gate_rows(conn, cid, line, channel, None, current.target)
        if not report.ok:
            raise GateRefused(report)
    evidence = _evidence(report, applied, reason, back=current.entry)
    return _move(refs, current, line, channel, cid, by, Action.ROLLBACK, evidence)


def _holders(conn, line: str, channel: str) -> int:
    """How many distinct commits have held LINE@CHANNEL."""
    h = s.ref_history.c
    q = sa.select(sa.func.count(sa.distinct(h.new))).where(
        h.line == line, h.name == channel, h.kind == RefKind.CHANNEL
    )
    return conn.execute(q).scalar()


def approve(repo: Repo, rev: str, channel: str, *, by: str) -> Approval:
    """Record BY's approval of REV for CHANNEL. An identity counts once."""
    with repo.db.write() as conn:
        cid, _ = _target(conn, rev, channel)
        a = s.approvals.c
        q = sa.select(s.approvals).where(a.commit_id == cid, a.channel == channel, a.by == by)
        created = False
        if conn.execute(q).first() is None:
            # The same identity approving at the same moment counts once, and only the
            # insert that stored the row says it created it.
            row = dict(commit_id=cid, channel=channel, by=by, at=utcnow())
            created = insert_new(conn, s.approvals, row)
        row = conn.execute(q).one()
        return Approval(CommitId(cid), channel, by, iso(row.at), created=created)


def channel_rm(repo: Repo, ref: str, *, by: str) -> Move:
    """Remove LINE@CHANNEL (a typo's channel, one no longer used); logged in its history as
    a `delete`. A protected channel, or one a contract names, is never removed: its history
    is the evidence its gate rests on. Nor one with an open canary."""
    from mint.gates.canary import open_row  # here: canaries build on promotion's moves

    line, _, channel = ref.partition("@")
    if not line or not channel:
        raise RevisionNotFound(ref, "expected LINE@CHANNEL")
    check_local_ref("channel", channel)
    with repo.db.write() as conn:
        refs = RefsContainer(conn)
        current = refs.get(line, channel)
        if current is None or current.kind != RefKind.CHANNEL:
            raise RevisionNotFound(
                ref, "unknown channel", near_refs(conn, line, channel, RefKind.CHANNEL)
            )
        why = guard_of(conn, channel)
        if why is not None:
            raise ChannelGuarded(ref, why)
        canary = open_row(conn, line, channel)
        if canary is not None:
            raise CanaryOpen(ref, canary.id, canary.candidate)
        entry = refs.remove_if_equals(current, by=by)
        return move_of(conn, entry)
