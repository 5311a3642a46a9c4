"""One turn of a MoL conversation: route, answer with the chosen expert, summarise the turn."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from mint.runtime import prompts
from mint.runtime.engine import Engine
from mint.runtime.errors import EmptyConversation, UnknownModel

DEFAULT_MAX_NEW_TOKENS = 24
DEFAULT_SUMMARY_TOKENS = 12
STAGES = ("route", "answer", "summary")  # timed in this order; `total` spans them


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

    def message(self) -> dict:
        """The assistant message to append to the conversation for the next turn."""
        return {
            "role": "assistant",
            "content": self.answer,
            "mint": {"route": self.route, "summary": self.summary},
        }


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
    if not any(
        m.get("role") == "user" and prompts.text_of(m.get("content")).strip() for m in messages
    ):
        raise EmptyConversation("the conversation has no user message")
    if expert is not None and expert not in engine.experts:
        raise UnknownModel(expert, engine.spec.name)
    clock = [time.perf_counter()]
    decision = engine.route(messages) if expert is None else None
    label = decision.label if decision else expert
    clock.append(time.perf_counter())
    answer = engine.answer(label, messages, max_new_tokens)
    clock.append(time.perf_counter())
    summary = engine.summarize(prompts.last_user(messages), answer.text, summary_tokens)
    clock.append(time.perf_counter())
    latency = {stage: clock[i + 1] - clock[i] for i, stage in enumerate(STAGES)}
    latency["total"] = clock[-1] - clock[0]
    return TurnResult(
        set_id=engine.id,
        set_name=engine.spec.name,
        route=label,
        answer=answer.text,
        summary=summary.text,
        finish_reason=answer.finish_reason,
        prompt_tokens=answer.prompt_tokens,
        completion_tokens=answer.completion_tokens,
        latency=latency,
        route_fallback=decision.fallback if decision else None,
        direct=expert is not None,
    )
