"""The live side of a round of `mint improve`: production's floor, an open canary's verdict,
and staging taken back from a set the live numbers rejected.

Every decision rests on `mint.gates.live` (weighed means, intervals, the policy of the
contract's `[live]` table). Each step is idempotent when repeated after a kill at any named
point (`mint.faults`): a rollback stops the open canary in its own transaction, a promote of
the candidate stops it as promoted in its own, and a round that finds staging on a set the
loop tried that neither holds production nor has an open canary takes staging back first.
"""

from __future__ import annotations

import datetime as dt

from mint.errors import GateRefused, NothingToRollBack, RevisionNotFound
from mint.faults import crash_point
from mint.gates.canary import PRODUCTION_VARIANT, production_variants
from mint.gates.live import decide, groups_of, stats_of, under_floor
from mint.ids import CanaryOutcome
from mint.objects import Move, Round, VariantStats

STAGING_STEPS = 5  # staging taken back at most this many holders in one round


def fmt(v: VariantStats) -> str:
    """A variant's live numbers in words (for history rows and steps)."""
    if v.mean is None:
        return f"{v.variant} {v.commit[:12]}: no scored traces of {v.traces}"
    text = (
        f"{v.variant} {v.commit[:12]}: mean {v.mean:.3f} [{v.low:.3f}, {v.high:.3f}] over "
        f"{v.scored} scored of {v.traces} traces, {v.users} users, {v.callers} callers"
    )
    return text + (f" ({v.unmet})" if v.unmet else "")


def live_of(r, commit: str, since: str) -> VariantStats:
    """Production's traces of COMMIT since SINCE, weighed by caller and user under the
    round's policy as `canary_status` weighs a variant."""
    at = dt.datetime.fromisoformat(since)
    served = [
        t
        for variant in production_variants(r.target)
        for t in r.b.traces_ls(set_rev=commit, since=at, variant=variant, limit=None)
        if t.set_line == r.line
    ]
    scored = [(t.score, t.feedback_by, t.user, t.id) for t in served if t.score is not None]
    return stats_of(PRODUCTION_VARIANT, commit, len(served), groups_of(scored), r.policy)


def failed_checks(checks) -> str:
    """A gate's failing rows in words."""
    return "; ".join(f"{c.check} {c.found} (needs {c.required})" for c in checks if not c.ok)


def last_entry(r) -> int | None:
    """The newest row of production's history (the canary start or stop just written)."""
    newest = r.b.history(r.production, n=1)
    return newest[-1].id if newest else None


def tried(r) -> set[str]:
    """The sets that have had a canary on production or have held it: each is tried once
    (unless an operator retries it). Production's history has a row for each."""
    return {m.to for m in r.b.history(r.production) if m.to is not None}


def _ended(r, move: Move) -> None:
    """The step of a canary that MOVE stopped in its own transaction."""
    if move.stopped_canary is not None:
        why = f"the canary ended in the {move.action}'s transaction"
        r.step("canary-stop", move.to, r.target, why, entry=last_entry(r))


# --- 1. the live floor --------------------------------------------------------------


def below_floor(r, holder: Move) -> bool:
    """Roll production back when the upper bound of its live mean since it took the channel
    lies under the floor (the rollback stops an open canary in its transaction)."""
    stats = live_of(r, holder.to, holder.at)
    if not under_floor(stats, r.policy):
        return False
    p = r.policy
    why = f"live floor: {fmt(stats)}: upper bound {stats.high:.3f} < min_score {p.min_score:g}"
    why += f" ({r.contract.name})"
    try:
        move = r.b.rollback(r.production, by=r.by, reason=f"{why}; rolled back by the loop")
    except NothingToRollBack as exc:
        r.step("refuse", holder.to, r.target, f"{why}; cannot roll back: {exc}")
        return False
    r.step("rollback", move.to, r.target, move.reason, entry=move.id)
    _ended(r, move)
    crash_point("improve.rolled-back")
    staging_back(r)
    return True


# --- 2. an open canary ------------------------------------------------------------------


def stop(r, outcome: CanaryOutcome, why: str) -> None:
    c = r.b.canary_stop(r.production, by=r.by, reason=why, outcome=outcome)
    r.step("canary-stop", c.candidate, r.target, f"{outcome}: {why}", entry=last_entry(r))


def _stopped(r, why: str) -> Round:
    stop(r, CanaryOutcome.STOPPED, why)
    crash_point("improve.canary-stopped")
    staging_back(r)
    return r.done("stopped")


def judge_canary(r, live, holder: Move) -> Round:
    """Promote, stop or wait on production's open canary (LIVE: its status)."""
    canary = live.canary
    if canary.candidate == holder.to:  # its candidate holds production (moved elsewhere)
        stop(r, CanaryOutcome.PROMOTED, f"its candidate holds {r.target}")
        return r.done("promoted")
    if canary.baseline != holder.to:  # production moved under it: never judge on those numbers
        why = (
            f"its baseline {canary.baseline[:12]} no longer holds {r.target} ({holder.to[:12]} "
            f"does since #{holder.id}, {holder.action} by {holder.by})"
        )
        return _stopped(r, why)
    prod, cand = live.production, live.candidate
    numbers = f"{fmt(cand)}; {fmt(prod)}"
    verdict = decide(prod, cand, r.policy)
    if verdict.action == "wait":
        r.step("wait", canary.candidate, r.target, f"{verdict.reason}: {numbers}")
        return r.done("waiting")
    if verdict.action == "stop":
        return _stopped(r, f"live: canary against {r.target}: {verdict.reason} ({numbers})")
    why = f"live: canary mean {cand.mean:.3f} against {r.target} {prod.mean:.3f}: "
    why += f"{verdict.reason} ({numbers}); promoted by the loop"
    try:
        move = r.b.promote(
            canary.candidate, r.target, by=r.by, contract=r.contract.name, reason=why
        )
    except GateRefused as exc:
        failed = failed_checks(exc.report.checks)
        return _stopped(r, f"{r.target}'s gate refused it: {failed}")
    evaluation = move.evaluations[0] if move.evaluations else None
    r.step("promote", move.to, r.target, why, entry=move.id, evaluation=evaluation)
    _ended(r, move)
    return r.done("promoted")


# --- staging taken back ------------------------------------------------------------------


def staging_back(r) -> None:
    """While staging holds a set the loop tried that neither holds production nor has an open
    canary (rejected: its canary stopped, or rolled back from production), move staging back
    to its previous holder. Run after each rejection and at the start of a round, so a round
    killed between a rejection and this step is cleaned up by the next."""
    if r.staging is None:
        return
    for _ in range(STAGING_STEPS):
        try:
            held = r.b.resolve(f"{r.line}@{r.staging}")
            holder = r.b.resolve(r.production)
        except RevisionNotFound:
            return
        if held == holder or held not in tried(r) or r.b.canary_of(r.production) is not None:
            return
        why = f"loop: {held[:12]} was rejected on {r.target} (see mint history {r.production})"
        try:
            move = r.b.rollback(f"{r.line}@{r.staging}", by=r.by, reason=why)
        except NothingToRollBack:
            return
        r.step("rollback", move.to, r.staging, move.reason, entry=move.id)
