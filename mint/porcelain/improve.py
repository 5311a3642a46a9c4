"""The loop that learns from deployment: one idempotent round of a state machine per call.

A round looks at SET_LINE's target channel (`to`, production by default; "production" below)
and does the first of these that applies:

1. **Live floor.** When production's holder, since it took the channel, has enough scored
   traces to be judged (`min_traces`, from enough users and callers) and the upper bound of
   its weighed mean lies under the contract's `[live] min_score`, roll production back (the
   rollback stops an open canary in its transaction) and take staging back from a rejected
   set. The numbers are `mint.gates.live`'s: no caller or user over its share.
2. **Open canary.** A canary whose baseline no longer holds production (production moved
   under it) is stopped, never judged. Otherwise, once both variants can be judged: promote
   the candidate to production (through its gate; the promote stops the canary as promoted
   in its transaction) when the interval of the difference lies above `-max_drop`, stop the
   canary and take staging back when it lies below, and stop it undecided once both have
   `max_traces`; else wait.
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
candidate again, until an operator retries it (`retry`: history names it a retry, and by
whom). A round first takes staging back from a set the loop rejected, so a round killed at any
named point (`improve.*`, `promote.*`, `rollback.*` in `mint.faults`) is finished by the next.

A round reads and writes only through the repository's backend (`mint.backend`), so it runs
the same on a repository on this machine and on a registry (`mint --repo URL improve`): what
it knows of production (its holder, since when, what it has held and which canaries it has
had) comes from the channel's history, the live numbers from its traces and their feedback.
"""

from __future__ import annotations

from collections.abc import Callable

from mint.backend import Backend, backend_of
from mint.errors import CanaryOpen, GateRefused, InvalidConfig, NoCanary, RevisionNotFound
from mint.faults import crash_point
from mint.gates.canary import check_fraction
from mint.gates.evaluations import finite_metric
from mint.gates.live import LivePolicy
from mint.ids import Action
from mint.objects import Evaluation, LoopStep, Move, Round
from mint.porcelain.commit import candidates, set_derive
from mint.porcelain.evaluate import evaluate as run_evaluator
from mint.porcelain.live_round import (
    below_floor,
    failed_checks,
    judge_canary,
    last_entry,
    staging_back,
    tried,
)
from mint.refs.revisions import check_name

PRODUCTION = "production"
STAGING = "staging"
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
        self.policy = LivePolicy.of(self.contract.live, min_traces=min_traces)
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
    merges: tuple[str, ...] | list[str] = (),
    combine=None,
    base_dir: str | None = None,
    retry: str | None = None,
    reason: str | None = None,
) -> Round:
    """One round of the loop on set LINE under CONTRACT towards channel TO (see the
    module's docstring).

    LINES limits the member lines whose heads are tried; CANARY is the canary's share of
    production's requests; MIN_TRACES (default: the contract's `[live] min_traces`, else 20)
    the scored traces each variant needs; EVALUATE records an evaluation of a candidate
    (default: the contract's evaluator on the set's checkout). MERGES (methods) also tries
    merges of the members with their lines' newer heads, made by COMBINE (the runtime's
    merge, `mint.porcelain.merge`) over the base at BASE_DIR. RETRY (an operator's, BY
    them, with REASON) starts the loop's canary of that set again, one the loop rejected
    included: it is gated and staged as a candidate is, and refused while a canary is open."""
    if min_traces is not None and min_traces < 1:
        raise InvalidConfig(f"a variant needs 1 scored trace or more, not {min_traces}")
    if merges and combine is None:
        raise InvalidConfig("merge candidates need the runtime's merge (combine) to be made")
    evaluate = evaluate or run_evaluator
    r = _Round(repo, line, contract, to, lines, canary, min_traces, evaluate, by)
    r.merges, r.combine, r.base_dir = tuple(merges), combine, base_dir
    holder = _holder(r)
    if retry is not None:
        return _retry(r, retry, holder, reason)
    if below_floor(r, holder):
        return r.done("rolled-back")
    live = _open_canary(r)
    if live is not None:
        return judge_canary(r, live, holder)
    staging_back(r)  # a round killed between a rejection and taking staging back
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
        live = r.b.canary_status(r.production, contract=r.contract.name)
    except NoCanary:
        return None
    return live if live.canary.stopped_at is None else None


# --- 3. candidates -----------------------------------------------------------------------


def _try_candidates(r: _Round) -> Round:
    found = candidates(r.repo, r.production, r.lines or None, merges=r.merges)
    done = tried(r)
    passing = []
    for cand in found:
        cid = _committed(r, cand)
        if cid in done:
            continue
        ev = _evaluation(r, cid)
        report = r.b.gate(cid, r.gated_on, r.contract.name)
        if report.ok:
            passing.append((_score(r, ev), cid, ev, cand))
            continue
        failed = failed_checks(report.checks)
        r.step(
            "refuse", cid, r.gated_on, f"{cand.description}: gate refused: {failed}", None, ev.id
        )
    if not passing:
        return r.done("refused" if any(s.action == "refuse" for s in r.steps) else "idle")
    passing.sort(key=lambda p: p[0], reverse=True)
    score, cid, ev, cand = passing[0]
    metrics = _metrics_text(ev)
    why = f"loop: best of {len(found)} candidates ({cand.description}): {metrics} "
    why += f"(evaluation {ev.id})"
    canary_why = f"loop: canary at {r.fraction:g} of {cid[:12]} ({metrics})"
    return r.done(_launch(r, cid, ev, why, canary_why))


def _committed(r: _Round, cand) -> str:
    if cand.existing is not None:
        return cand.existing
    uses = cand.uses | _merged(r, cand)
    res = set_derive(r.repo, cand.holder, uses, author=r.by, message=f"loop: {cand.description}")
    r.step("derive", res.id, None, cand.description)
    crash_point("improve.derived")
    return res.id


def _merged(r: _Round, cand) -> dict[str, str]:
    """label -> the merge CAND proposes for it, made now (a merge commit on its line)."""
    from mint.porcelain.merge import merge

    made = {}
    for label, m in cand.merges.items():
        if label in cand.changed:  # made in an earlier round
            continue
        recipe = m["recipe"]
        res = merge(
            r.repo,
            m["line"],
            recipe["inputs"],
            method=recipe["method"],
            weights=recipe["weights"],
            density=recipe["density"],
            seed=recipe["seed"],
            message=f"loop: {cand.description}",
            author=r.by,
            combine=r.combine,
            base_dir=r.base_dir,
        )
        r.step("merge", res.id, None, cand.description)
        made[label] = res.id
    return made


def _evaluation(r: _Round, cid: str) -> Evaluation:
    """CID's latest evaluation under the contract's current version, else a new one."""
    found = [e for e in r.b.evaluations_of(cid) if e.contract_id == r.contract.id]
    if found:
        return max(found, key=lambda e: e.id)
    ev = r.evaluate(r.repo, cid, r.contract.name, by=r.by)
    metrics = _metrics_text(ev)
    r.step("evaluate", cid, None, f"{r.contract.name} v{ev.version}: {metrics}", evaluation=ev.id)
    crash_point("improve.evaluated")
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


def _launch(r: _Round, cid: str, ev: Evaluation, why: str, canary_why: str) -> str:
    """Stage CID (with a staging contract) and start its canary against production."""
    if r.staging is not None:
        move = r.b.promote(cid, r.staging, by=r.by, contract=r.contract.name, reason=why)
        r.step("promote", cid, r.staging, why, entry=move.id, evaluation=ev.id)
        crash_point("improve.staged")
    try:
        r.b.canary_start(r.production, cid, r.fraction, by=r.by, reason=canary_why)
    except GateRefused as exc:
        # A canary takes production's gate (an approval, say): the candidate waits on staging,
        # and a later round tries again once the gate passes. The loop never forces it.
        failed = failed_checks(exc.report.checks)
        r.step("refuse", cid, r.target, f"{r.target}'s gate refused a canary: {failed}")
        return "refused"
    r.step("canary-start", cid, r.target, canary_why, entry=last_entry(r), evaluation=ev.id)
    return "canary-started"


# --- an operator's retry ------------------------------------------------------------------


def _retry(r: _Round, rev: str, holder: Move, reason: str | None) -> Round:
    """Start the loop's canary of REV again (an operator's command, recorded as a retry):
    gated under the contract and staged as a candidate is."""
    open_canary = r.b.canary_of(r.production)
    if open_canary is not None:
        raise CanaryOpen(r.production, open_canary.id, open_canary.candidate)
    cid = r.b.resolve(rev)
    if cid == holder.to:
        raise InvalidConfig(f"{cid[:12]} already holds {r.production}; nothing to retry")
    ev = _evaluation(r, cid)
    report = r.b.gate(cid, r.gated_on, r.contract.name)
    if not report.ok:
        failed = failed_checks(report.checks)
        r.step("refuse", cid, r.gated_on, f"retry: gate refused: {failed}", None, ev.id)
        return r.done("refused")
    ended = _rejection(r, cid)
    note = f"retry of {cid[:12]} by {r.by}" + (f", {ended}" if ended else "")
    note += f": {reason}" if reason else ""
    metrics = _metrics_text(ev)
    canary_why = f"{note}; canary at {r.fraction:g} of {cid[:12]} ({metrics})"
    return r.done(_launch(r, cid, ev, f"{note}: {metrics} (evaluation {ev.id})", canary_why))


def _rejection(r: _Round, cid: str) -> str | None:
    """How the loop last rejected CID on production (its history row), if it did."""
    for m in reversed(r.b.history(r.production)):
        if (
            m.action == Action.CANARY_STOP
            and m.to == cid
            and not str(m.reason).startswith("promoted")
        ):
            return f"its canary stopped at #{m.id}"
        if m.action == Action.ROLLBACK and m.from_ == cid:
            return f"rolled back from {r.target} at #{m.id}"
    return None
