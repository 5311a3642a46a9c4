"""Short turns run between the stages of a long batch (issue 19, item 15).

A prompt that fills the model's context makes each of its batch's three stages (route,
answer, summary) a full-context forward pass. A small chat that arrived meanwhile used to wait
for all three; the scheduler now runs the short turns waiting at each stage boundary of a long
batch, so a small chat waits for one stage at most. No timing is asserted: the order in which
turns finish is.
"""

from __future__ import annotations

import threading
import time

import pytest

from mint.runtime.batching import BatchPolicy, Scheduler

from support.runtime import make_spec, serving


class Turn:
    def __init__(self, name: str, long: bool):
        self.n, self.long, self.cancelled, self.finished = name, long, False, None

    def finish(self, result, error=None):
        self.finished = (result, error)


def wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_the_scheduler_runs_waiting_short_turns_between_a_long_batchs_stages():
    ran: list[tuple[str, list[str]]] = []
    scheduler: Scheduler

    def run(batch):
        names = [t.n for t in batch]
        if not batch[0].long:
            ran.append(("short", names))
            scheduler.between()  # a short batch never yields to others
            return
        ran.append(("route", names))
        if names == ["L1"]:
            for name, long in (("s1", False), ("L2", True), ("s2", False), ("s3", False)):
                scheduler.submit(Turn(name, long))
            threading.Thread(target=scheduler.between).start()  # another thread: no effect
        scheduler.between()
        ran.append(("answer", names))
        scheduler.between()  # nothing short is waiting
        ran.append(("summary", names))

    scheduler = Scheduler(run, BatchPolicy(window=0, max_batch=2))
    scheduler.submit(Turn("L1", True))
    wait_for(lambda: len(ran) == 8)
    scheduler.close()
    assert ran == [
        ("route", ["L1"]),
        ("short", ["s1", "s2"]),  # at most max_batch, in order, passing the long L2
        ("answer", ["L1"]),
        ("short", ["s3"]),
        ("summary", ["L1"]),
        ("route", ["L2"]),
        ("answer", ["L2"]),
        ("summary", ["L2"]),
    ]


@pytest.fixture(scope="module")
def spec(demo):
    return make_spec(demo)


def user(text):
    return [{"role": "user", "content": text}]


def test_a_small_chat_is_answered_between_the_stages_of_a_long_prompt(demo, spec):
    long_text = "please fix the python bug " * 200  # 5,200 characters: past the tiny context
    runtime = serving(demo.base, spec, batching=BatchPolicy(window=0, max_batch=4))
    events: list[tuple[str, str]] = []
    tickets = {}

    def on_long(kind, value):
        events.append(("long", kind))
        if kind == "route":  # the long turn is routed; its answer stage comes next
            tickets["short"] = runtime.submit(user("align the button"), on_event=on_short)

    def on_short(kind, value):
        events.append(("short", kind))

    try:
        tickets["long"] = runtime.submit(user(long_text), on_event=on_long)
        long = tickets["long"].result(120)
        short = tickets["short"].result(120)
        ends = [e for e in events if e[1] != "text"]
        assert ends == [("long", "route"), ("short", "route"), ("short", "done"), ("long", "done")]
        alone_short = runtime.turn(user("align the button"))
        alone_long = runtime.turn(user(long_text))
    finally:
        runtime.close()
    assert (short.route, short.answer, short.summary) == (
        alone_short.route,
        alone_short.answer,
        alone_short.summary,
    )
    assert (long.route, long.answer, long.summary) == (
        alone_long.route,
        alone_long.answer,
        alone_long.summary,
    )
    assert long.finish_reason in {"stop", "length"} and long.answer


def test_other_turns_decoded_between_the_steps_of_a_row_change_nothing(demo, spec):
    """Between two decoding steps another batch runs on the same model, under other adapters
    (as the scheduler runs short turns there): every row decodes as it would undisturbed, and
    a group of rows with different adapters never pauses (PEFT's per-row hooks are set)."""
    from mint.runtime import prompts
    from mint.runtime.decoding import GenRow, generate_each
    from mint.runtime.engine import load_engine
    from mint.runtime.loader import SharedBase

    base = SharedBase.load(demo.base)
    engine = load_engine(base, spec)
    try:
        rows = []
        for label, text in (("coding", "please fix the python bug " * 30), ("ui", "align it")):
            head, body = prompts.answer_text(user(text), label)
            rows.append(GenRow(engine.experts[label], engine.prompt(head, body, 16), 16))
        others = [GenRow(engine.summarizer, rows[1].prompt, 8)]
        plain = [generate_each(base, [row])[0] for row in rows]
        inner: list = []

        def between() -> bool:
            inner.append(generate_each(base, others)[0])  # another adapter, same thread
            return True

        paused = [generate_each(base, [row], between)[0] for row in rows]
        steps = len(inner)
        mixed = generate_each(base, rows, between)
    finally:
        engine.close()
    assert paused == plain and mixed == plain
    assert steps >= 2 and len(inner) == steps  # it paused; the mixed group did not
    assert all(g.completion_tokens > 0 for g in plain)
