"""Turns of a MoL conversation: route, answer with the chosen expert, summarise the turn.

`run_turns(engine, jobs)` runs a batch of turns on one set version, stage by stage: the route
stage of every routed job is one call of the router (`score_batch`), the answers are decoded
together (each row with its expert's adapter), then the summaries. `run_turn` is a batch of one.

An adapter served alone (`SetSpec.single`) runs the answer stage only: its line is every
turn's route without a call of the engine's router, and no summary is written (its turns are
all its own, so it sees them verbatim).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mint.runtime import prompts
from mint.runtime.decoding import Generation, GenRow
from mint.runtime.engine import Engine
from mint.runtime.errors import EmptyConversation, UnknownModel
from mint.runtime.isolation import Failures

DEFAULT_MAX_NEW_TOKENS = 24
DEFAULT_SUMMARY_TOKENS = 12
STAGES = ("route", "answer", "summary")  # timed in this order
# latency also has `queue` (waiting for the batch to start) and `total` (queue and stages)


@dataclass(frozen=True)
class TurnResult:
    """What one turn produced, which set version produced it, and how long each stage took."""

    set_id: str
    set_name: str
    route: str
    answer: str
    summary: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    # seconds per stage (route, answer, summary) and in all (total)
    latency: dict[str, float] = field(default_factory=dict)
    route_fallback: str | None = None  # why the default label was used, when it was
    direct: bool = False  # the caller named the expert; no routing ran
    batch: int = 1  # how many turns ran together in this one's batch
    probs: dict[str, float] = field(default_factory=dict)  # label -> router probability
    expert_commit: str | None = None  # the commit of the expert that answered

    def message(self) -> dict:
        """The assistant message to append to the conversation for the next turn."""
        return {
            "role": "assistant",
            "content": self.answer,
            "mint": {"route": self.route, "summary": self.summary},
        }


def _never() -> bool:
    return False


@dataclass(frozen=True)
class TurnJob:
    """One turn to run in a batch: the conversation, who answers, limits and the caller's hooks.

    `on_route(label, fallback)` is called once the route stage has run (before any answer
    token); `on_text(delta)` receives the answer as it is decoded; `cancelled()` returning True
    stops the job's answer and skips its summary. `queued` is how long it waited (seconds).
    `on_error(error)` is called when the job fails alone in its batch (see `run_turns`)."""

    messages: Sequence[dict]
    expert: str | None = None
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    summary_tokens: int = DEFAULT_SUMMARY_TOKENS
    on_route: Callable[[str, str | None], None] | None = None
    on_text: Callable[[str], None] | None = None
    cancelled: Callable[[], bool] = _never
    queued: float = 0.0
    on_error: Callable[[BaseException], None] | None = None


def check_turn(engine: Engine, messages: Sequence[dict], expert: str | None) -> None:
    """Refuse a turn that cannot run: no user message (EmptyConversation), an expert the
    version does not have (UnknownModel)."""
    if not any(
        m.get("role") == "user" and prompts.text_of(m.get("content")).strip() for m in messages
    ):
        raise EmptyConversation("the conversation has no user message")
    if expert is not None and expert not in engine.experts:
        raise UnknownModel(expert, engine.spec.name)


def run_turn(
    engine: Engine,
    messages: Sequence[dict],
    *,
    expert: str | None = None,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    summary_tokens: int = DEFAULT_SUMMARY_TOKENS,
) -> TurnResult:
    """Route the conversation (unless `expert` names one), answer, then summarise the turn.

    `messages` end with the user's new message. Earlier assistant messages that carry
    `mint.route`/`mint.summary` (as `TurnResult.message()` does) are shown verbatim to the
    expert that wrote them and as their summary to every other expert.
    """
    check_turn(engine, messages, expert)
    job = TurnJob(messages, expert, max_new_tokens, summary_tokens)
    return run_turns(engine, [job])[0]


def run_turns(
    engine: Engine, jobs: Sequence[TurnJob], between: Callable[[], None] | None = None
) -> list[TurnResult]:
    """Run checked jobs together on one version, stage by stage; results in job order.

    `between()`, when given, is called after the route stage, after the answer stage and
    between the decoding steps of both generation stages (the scheduler runs there the short
    turns that arrived while a long batch ran); its time counts in no stage's latency.

    Each job's prompts are tokenized on their own, and a decoding call that fails is retried
    row by row (see `isolation`): a job that cannot run fails alone, at once, through its
    `on_error` (an UnusableTurn when its input is to blame), while the others go on; its
    place in the results holds an empty result whose finish_reason is "cancelled". A job
    without `on_error` raises instead.
    """
    failures = Failures(jobs)
    clock = _Clock(between)
    picks = _route(engine, jobs)
    for job, (label, fallback, _) in zip(jobs, picks):
        if job.on_route is not None:
            job.on_route(label, fallback)
    clock.lap()
    rows = failures.each(range(len(jobs)), lambda i: _answer_row(engine, jobs[i], picks[i][0]))
    answers = _generate(engine, rows, failures, clock.pauser())
    clock.lap()
    summaries = _summaries(engine, jobs, answers, failures, clock.pauser())
    stages = dict(zip(STAGES, clock.lap(last=True)))
    return [
        _result(
            engine,
            job,
            pick,
            FAILED if i in failures else answers[i],
            summaries.get(i, ""),
            stages,
            len(jobs),
        )
        for i, (job, pick) in enumerate(zip(jobs, picks))
    ]


FAILED = Generation("", 0, 0, "cancelled")  # the place of a job that failed alone


class _Clock:
    """Stage times of a batch; `between()` runs at each lap but the last and wherever a stage
    pauses (`pauser`), and its time counts in no stage."""

    def __init__(self, between: Callable[[], object] | None):
        self.between, self.laps, self.paused = between, [], 0.0
        self.start = time.perf_counter()

    def pause(self) -> bool:
        """Run `between()`; whether it ran anything."""
        started = time.perf_counter()
        try:
            return bool(self.between()) if self.between is not None else False
        finally:
            self.paused += time.perf_counter() - started

    def pauser(self) -> Callable[[], bool] | None:
        return self.pause if self.between is not None else None

    def lap(self, last: bool = False) -> list[float]:
        self.laps.append(time.perf_counter() - self.start - self.paused)
        if not last:
            self.pause()
        self.start, self.paused = time.perf_counter(), 0.0
        return self.laps


def _route(engine: Engine, jobs: Sequence[TurnJob]) -> list[tuple[str, str | None, dict]]:
    """(label, fallback, probabilities) of each job: one router pass for the routed ones,
    none at all for an adapter served alone."""
    if engine.spec.single:
        return [(job.expert or engine.spec.default, None, {}) for job in jobs]
    routed = [job for job in jobs if job.expert is None]
    decisions = iter(engine.route_many([job.messages for job in routed]) if routed else [])
    return [
        (job.expert, None, {}) if job.expert is not None else _pick(next(decisions))
        for job in jobs
    ]


def _pick(decision) -> tuple[str, str | None, dict[str, float]]:
    return decision.label, decision.fallback, decision.probs()


def _answer_row(engine: Engine, job: TurnJob, label: str) -> GenRow:
    head, body = prompts.answer_text(job.messages, label)
    prompt = engine.prompt(head, body, job.max_new_tokens)
    adapter = engine.experts[label]
    return GenRow(adapter, prompt, job.max_new_tokens, job.on_text, job.cancelled)


def _generate(
    engine: Engine,
    rows: dict[int, GenRow],
    failures: Failures,
    between: Callable[[], bool] | None = None,
) -> dict[int, Generation]:
    """The generation of each job's row; a row that failed even alone fails its job.
    `between()` may run between decoding steps (see `decoding.generate_each`)."""
    order = list(rows)
    out: dict[int, Generation] = {}
    made = engine.generate_each([rows[i] for i in order], between) if order else []
    for i, got in zip(order, made):
        if isinstance(got, Generation):
            out[i] = got
        else:
            failures.fail(i, got)
    return out


def _summaries(
    engine: Engine,
    jobs: Sequence[TurnJob],
    answers: dict[int, Generation],
    failures: Failures,
    between: Callable[[], bool] | None = None,
) -> dict[int, str]:
    """Each answered job's summary; none for jobs cancelled meanwhile, nor for any job of an
    adapter served alone."""
    if engine.spec.single:
        return {}
    live = [
        i
        for i, answer in answers.items()
        if answer.finish_reason != "cancelled" and not jobs[i].cancelled()
    ]

    def row(i: int) -> GenRow:
        user, answer = prompts.last_user(jobs[i].messages), answers[i].text
        head, body = prompts.summary_text(engine.spec.summary_prompt, user, answer)
        prompt = engine.prompt(head, body, jobs[i].summary_tokens)
        return GenRow(engine.summarizer, prompt, jobs[i].summary_tokens)

    summaries = _generate(engine, failures.each(live, row), failures, between)
    return {i: generation.text for i, generation in summaries.items()}


def _result(
    engine: Engine,
    job: TurnJob,
    pick: tuple[str, str | None, dict[str, float]],
    answer: Generation,
    summary: str,
    stages: dict[str, float],
    batch: int,
) -> TurnResult:
    label, fallback, probs = pick
    latency = {**stages, "queue": job.queued}
    latency["total"] = sum(latency.values())
    return TurnResult(
        set_id=engine.id,
        set_name=engine.spec.name,
        route=label,
        answer=answer.text,
        summary=summary,
        finish_reason=answer.finish_reason,
        prompt_tokens=answer.prompt_tokens,
        completion_tokens=answer.completion_tokens,
        latency=latency,
        route_fallback=fallback,
        direct=job.expert is not None,
        batch=batch,
        probs=probs,
        expert_commit=engine.spec.experts[label].commit_id
        if label in engine.spec.experts
        else None,
    )
