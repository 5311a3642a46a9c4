"""The loop that learns from deployment: one idempotent round of a state machine per call.

A round looks at SET_LINE's target channel (`to`, production by default; "production" below)
and does the first of these that applies:

1. **Live floor.** When production's holder has `min_traces` scored traces since it took
   the channel and their mean is below the contract's `[live] min_score`, roll production
   back (and stop an open canary, and take staging back from the failed set).
2. **Open canary.** When both variants have `min_traces` scored traces: promote the
   candidate to production (through its gate) if its mean is at least production's minus
   `[live] max_drop` (the gate applies production's contracts and this one, so the move
   keeps the evaluations it rests on), and stop the canary as promoted; otherwise stop it
   and take staging back. Fewer traces: wait.
3. **No canary.** List the candidates one step from production's holder, commit each new
   configuration (`set derive`), evaluate it under the contract, take the best that passes
   the gate of the contract's channel, and start a canary of it against production, which
   takes production's gate as a promote would (if that refuses, say for want of an
   approval, the candidate waits for a later round). A contract for staging puts the
   candidate on staging first; a contract for production itself skips that step (no
   staging channel is needed): the candidate is gated by production's contract and its
   canary runs straight against production. A contract for any other channel is refused.

Every write is an ordinary mint action (derive, evaluation, promote, rollback, canary start
and stop) done as `by` (on a registry, as the token's identity), with its numbers in the
history row's reason and the gate's contract and evaluations beside it. A configuration is
tried once: one that has had a canary on production, or has held production, is not a
candidate again.

A round reads and writes only through the repository's backend (`mint.backend`), so it runs
the same on a repository on this machine and on a registry (`mint --repo URL improve`): what
it knows of production (its holder, since when, what it has held and which canaries it has
had) comes from the channel's history, the live numbers from its traces and their feedback.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable

from mint.backend import Backend, backend_of
from mint.errors import GateRefused, InvalidConfig, NoCanary, NothingToRollBack, RevisionNotFound
from mint.gates.canary import (
    PRODUCTION_VARIANT,
    check_fraction,
    production_variants,
    wilson,
)
from mint.gates.evaluations import finite_metric
from mint.ids import Action, CanaryOutcome, CommitId
from mint.objects import Evaluation, LoopStep, Move, Round, VariantStats
from mint.porcelain.commit import candidates, set_derive
from mint.porcelain.evaluate import evaluate as run_evaluator
from mint.refs.revisions import check_name

PRODUCTION = "production"
STAGING = "staging"
DEFAULT_MIN_TRACES = 20
LOOP_IDENTITY = "mint-loop"
_PAGE = 50  # history rows read at a time while looking for production's latest move
_EVENTS = {Action.CANARY_START, Action.CANARY_STOP}  # history rows that move no ref

# evaluate(repo, commit id, contract name, by=...) -> Evaluation (recorded)
Evaluate = Callable[..., Evaluation]


class _Round:
    """What one round knows and has done."""

    def __init__(self, repo, line, contract, to, lines, fraction, min_traces, evaluate, by):
        self.repo, self.line, self.lines, self.by = repo, line, list(lines), by
        self.b: Backend = backend_of(repo)
        self.target = check_name("channel", to)
        self.fraction, self.evaluate = check_fraction(fraction), evaluate
        self.contract = self.b.contract_show(contract, line=line)
        live = self.contract.live or {}
        self.min_score = live.get("min_score")
        self.max_drop = live.get("max_drop", 0.0)
        self.min_traces = min_traces or live.get("min_traces") or DEFAULT_MIN_TRACES
        self.staging = _staging(self.contract, self.target)
        self.steps: list[LoopStep] = []

    @property
    def production(self) -> str:
        return f"{self.line}@{self.target}"

    @property
    def gated_on(self) -> str:
        """The channel whose gate a candidate passes first: staging, or the target itself."""
        return self.staging or self.target

    def step(self, action, commit, channel, detail, entry=None, evaluation=None) -> None:
        self.steps.append(LoopStep(action, commit, channel, detail, entry, evaluation))

    def done(self, outcome: str) -> Round:
        return Round(self.line, self.contract.name, outcome, list(self.steps))


def _staging(contract, target: str) -> str | None:
    """STAGING when CONTRACT guards it; None when it guards TARGET (no staging step)."""
    if contract.channel == target:
        return None
    if contract.channel == STAGING:
        return STAGING
    raise InvalidConfig(
        f"contract {contract.name} guards channel {contract.channel}; the loop to {target} "
        f"needs a contract for {STAGING} or for {target}"
    )


def improve(
    repo,
    line: str,
    *,
    contract: str,
    to: str = PRODUCTION,
    lines: tuple[str, ...] | list[str] = (),
    canary: float = 0.1,
    min_traces: int | None = None,
    evaluate: Evaluate | None = None,
    by: str = LOOP_IDENTITY,
) -> Round:
    """One round of the loop on set LINE under CONTRACT towards channel TO (see the
    module's docstring).

    LINES limits the member lines whose heads are tried; CANARY is the canary's share of
    production's requests; MIN_TRACES (default: the contract's `[live] min_traces`, else 20)
    the scored traces each variant needs; EVALUATE records an evaluation of a candidate
    (default: the contract's evaluator on the set's checkout)."""
    if min_traces is not None and min_traces < 1:
        raise InvalidConfig(f"a variant needs 1 scored trace or more, not {min_traces}")
    evaluate = evaluate or run_evaluator
    r = _Round(repo, line, contract, to, lines, canary, min_traces, evaluate, by)
    holder = _holder(r)
    if _below_floor(r, holder):
        return r.done("rolled-back")
    live = _open_canary(r)
    if live is not None:
        return _judge_canary(r, live, holder)
    return _try_candidates(r)


def _holder(r: _Round) -> Move:
    """Production's latest move: its `to` holds the channel, since its `at`."""
    before = None
    while True:
        try:
            page = r.b.history(r.production, n=_PAGE, before=before)
        except RevisionNotFound:
            page = []
        for move in reversed(page):
            if move.action in _EVENTS:
                continue
            if move.to is None:  # removed
                break
            return move
        else:
            if len(page) == _PAGE:
                before = page[0].id
                continue
        raise RevisionNotFound(r.production, "the loop needs a holder on channel")


def _open_canary(r: _Round):
    """Production's open canary with both variants' live numbers since it started, or None."""
    try:
        live = r.b.canary_status(r.production)
    except NoCanary:
        return None
    return live if live.canary.stopped_at is None else None


def _live(r: _Round, commit: str, since: str) -> VariantStats:
    """Production's traces of COMMIT since SINCE and the scores their latest feedback gave,
    as `canary_status` counts a variant."""
    at = dt.datetime.fromisoformat(since)
    served = [
        t
        for variant in production_variants(r.target)
        for t in r.b.traces_ls(set_rev=commit, since=at, variant=variant, limit=None)
        if t.set_line == r.line
    ]
    scores = [t.score for t in served if t.score is not None]
    if not scores:
        return VariantStats(PRODUCTION_VARIANT, CommitId(commit), len(served), 0, None, None, None)
    mean = math.fsum(scores) / len(scores)
    low, high = wilson(mean, len(scores))
    return VariantStats(
        PRODUCTION_VARIANT, CommitId(commit), len(served), len(scores), mean, low, high
    )


def _fmt(v) -> str:
    if v.mean is None:
        return f"{v.variant} {v.commit[:12]}: no scored traces of {v.traces}"
    return (
        f"{v.variant} {v.commit[:12]}: mean {v.mean:.3f} "
        f"[95% {v.low:.3f}, {v.high:.3f}] over {v.scored} scored of {v.traces} traces"
    )


# --- 1. the live floor --------------------------------------------------------------


def _below_floor(r: _Round, holder: Move) -> bool:
    """Roll production back when its live mean since it took the channel is under the floor."""
    if r.min_score is None:
        return False
    stats = _live(r, holder.to, holder.at)
    if stats.scored < r.min_traces or stats.mean >= r.min_score:
        return False
    why = f"live floor: {_fmt(stats)} < min_score {r.min_score:g} ({r.contract.name})"
    try:
        move = r.b.rollback(r.production, by=r.by, reason=f"{why}; rolled back by the loop")
    except NothingToRollBack as exc:
        r.step("refuse", holder.to, r.target, f"{why}; cannot roll back: {exc}")
        return False
    r.step("rollback", move.to, r.target, move.reason, entry=move.id)
    if r.b.canary_of(r.production) is not None:
        _stop(r, CanaryOutcome.STOPPED, f"{r.target} was rolled back under its live floor")
    _staging_back_from(r, holder.to, f"it fell under {r.target}'s live floor")
    return True


def _stop(r: _Round, outcome: CanaryOutcome, why: str) -> None:
    c = r.b.canary_stop(r.production, by=r.by, reason=why, outcome=outcome)
    r.step("canary-stop", c.candidate, r.target, f"{outcome}: {why}", entry=_last_entry(r))


def _last_entry(r: _Round) -> int | None:
    """The newest row of production's history (the canary start or stop just written)."""
    newest = r.b.history(r.production, n=1)
    return newest[-1].id if newest else None


def _staging_back_from(r: _Round, failed: str, why: str) -> None:
    """Staging holds FAILED (the loop put it there): move it back to its previous holder."""
    if r.staging is None:
        return
    try:
        held = r.b.resolve(f"{r.line}@{r.staging}")
    except RevisionNotFound:
        return
    if held != failed:
        return
    try:
        move = r.b.rollback(f"{r.line}@{r.staging}", by=r.by, reason=f"loop: {why}")
    except NothingToRollBack:
        return
    r.step("rollback", move.to, r.staging, move.reason, entry=move.id)


# --- 2. an open canary ------------------------------------------------------------------


def _judge_canary(r: _Round, live, holder: Move) -> Round:
    canary = live.canary
    if canary.candidate == holder.to:  # promoted in an earlier round that stopped short
        _stop(r, CanaryOutcome.PROMOTED, f"its candidate holds {r.target}")
        return r.done("promoted")
    prod, cand = live.production, live.candidate
    numbers = f"{_fmt(cand)}; {_fmt(prod)}"
    if prod.scored < r.min_traces or cand.scored < r.min_traces:
        r.step("wait", canary.candidate, r.target, f"need {r.min_traces} scored each: {numbers}")
        return r.done("waiting")
    need = prod.mean - r.max_drop
    if cand.mean < need:
        why = f"live: canary mean {cand.mean:.3f} < {r.target} {prod.mean:.3f} - max_drop "
        why += f"{r.max_drop:g} ({numbers})"
        _stop(r, CanaryOutcome.STOPPED, why)
        _staging_back_from(r, canary.candidate, "its canary was stopped")
        return r.done("stopped")
    why = f"live: canary mean {cand.mean:.3f} >= {r.target} {prod.mean:.3f} - max_drop "
    why += f"{r.max_drop:g} ({numbers}); promoted by the loop"
    try:
        move = r.b.promote(
            canary.candidate, r.target, by=r.by, contract=r.contract.name, reason=why
        )
    except GateRefused as exc:
        failed = "; ".join(f"{c.check} {c.found} (needs {c.required})" for c in _failed(exc))
        _stop(r, CanaryOutcome.STOPPED, f"{r.target}'s gate refused it: {failed}")
        _staging_back_from(r, canary.candidate, f"{r.target}'s gate refused it")
        return r.done("stopped")
    r.step("promote", move.to, r.target, why, entry=move.id, evaluation=_first(move))
    _stop(r, CanaryOutcome.PROMOTED, f"promoted to {r.target}: {cand.mean:.3f} live")
    return r.done("promoted")


def _failed(exc: GateRefused):
    return [c for c in exc.report.checks if not c.ok]


def _first(move) -> int | None:
    return move.evaluations[0] if move.evaluations else None


# --- 3. candidates -----------------------------------------------------------------------


def _try_candidates(r: _Round) -> Round:
    found = candidates(r.repo, r.production, r.lines or None)
    tried = _tried(r)
    passing = []
    for cand in found:
        cid = _committed(r, cand)
        if cid in tried:
            continue
        ev = _evaluation(r, cid)
        report = r.b.gate(cid, r.gated_on, r.contract.name)
        if report.ok:
            passing.append((_score(r, ev), cid, ev, cand))
            continue
        failed = "; ".join(
            f"{c.check} {c.found} (needs {c.required})" for c in report.checks if not c.ok
        )
        r.step(
            "refuse", cid, r.gated_on, f"{cand.description}: gate refused: {failed}", None, ev.id
        )
    if not passing:
        return r.done("refused" if r.steps else "idle")
    passing.sort(key=lambda p: p[0], reverse=True)
    score, cid, ev, cand = passing[0]
    return r.done(_launch(r, cid, ev, cand, len(found)))


def _committed(r: _Round, cand) -> str:
    if cand.existing is not None:
        return cand.existing
    res = set_derive(
        r.repo, cand.holder, cand.uses, author=r.by, message=f"loop: {cand.description}"
    )
    r.step("derive", res.id, None, cand.description)
    return res.id


def _tried(r: _Round) -> set[str]:
    """The sets that have had a canary on production or have held it: each is tried once.
    Production's history has a row for each (a canary's start names its candidate)."""
    return {m.to for m in r.b.history(r.production) if m.to is not None}


def _evaluation(r: _Round, cid: str) -> Evaluation:
    """CID's latest evaluation under the contract's current version, else a new one."""
    found = [e for e in r.b.evaluations_of(cid) if e.contract_id == r.contract.id]
    if found:
        return max(found, key=lambda e: e.id)
    ev = r.evaluate(r.repo, cid, r.contract.name, by=r.by)
    metrics = _metrics_text(ev)
    r.step("evaluate", cid, None, f"{r.contract.name} v{ev.version}: {metrics}", evaluation=ev.id)
    return ev


def _score(r: _Round, ev: Evaluation) -> float:
    """The contract's first metric, higher better (lower, when it sets only a max)."""
    metrics = r.contract.metrics
    if not metrics:
        return 0.0
    m = metrics[0]
    # a row stored before every door checked evaluations may hold no number: it ranks last
    value = finite_metric(ev.metrics.get(m["name"], 0.0))
    if value is None:
        return float("-inf")
    return -value if ("max" in m and "min" not in m) else value


def _metrics_text(ev: Evaluation) -> str:
    def text(v: object) -> str:
        number = finite_metric(v)
        return f"{number:.4g}" if number is not None else repr(v)[:40]

    return ", ".join(f"{k}={text(v)}" for k, v in sorted(ev.metrics.items()))


def _launch(r: _Round, cid: str, ev: Evaluation, cand, n: int) -> str:
    metrics = _metrics_text(ev)
    why = f"loop: best of {n} candidates ({cand.description}): {metrics} (evaluation {ev.id})"
    if r.staging is not None:
        move = r.b.promote(cid, r.staging, by=r.by, contract=r.contract.name, reason=why)
        r.step("promote", cid, r.staging, why, entry=move.id, evaluation=ev.id)
    reason = f"loop: canary at {r.fraction:g} of {cid[:12]} ({metrics})"
    try:
        r.b.canary_start(r.production, cid, r.fraction, by=r.by, reason=reason)
    except GateRefused as exc:
        # A canary takes production's gate (an approval, say): the candidate waits on staging,
        # and a later round tries again once the gate passes. The loop never forces it.
        failed = "; ".join(f"{c.check} {c.found} (needs {c.required})" for c in _failed(exc))
        r.step("refuse", cid, r.target, f"{r.target}'s gate refused a canary: {failed}")
        return "refused"
    r.step("canary-start", cid, r.target, reason, entry=_last_entry(r), evaluation=ev.id)
    return "canary-started"
