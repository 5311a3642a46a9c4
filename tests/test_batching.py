"""Batches across adapters: concurrent turns run together and answer as each would alone."""

from __future__ import annotations

import random
import threading
import time

import httpx
import pytest

from mint.examples import train
from mint.runtime import prompts
from mint.runtime.batching import BatchPolicy, Scheduler
from mint.runtime.decoding import GenRow, group_rows
from mint.runtime.engine import load_engine
from mint.runtime.errors import NotServing
from mint.runtime.loader import SharedBase
from mint.runtime.server import ServerThread

from support.runtime import adapter_files, make_spec, serving


@pytest.fixture(scope="module")
def spec(demo):
    return make_spec(demo)


@pytest.fixture(scope="module")
def engine(demo, spec):
    engine = load_engine(SharedBase.load(demo.base), spec)
    yield engine
    engine.close()


def user(text):
    return [{"role": "user", "content": text}]


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# --- the stages of a batch -------------------------------------------------------------------


def test_the_route_stage_of_a_batch_is_two_forward_passes_whatever_its_size(engine):
    conversations = [r["messages"] for r in train.synthetic_requests(12, seed=4)]
    calls = []
    hook = engine.base._raw.register_forward_hook(lambda *_: calls.append(1))
    try:
        together = engine.route_many(conversations)
    finally:
        hook.remove()
    assert len(calls) == 2  # the 12 prompts once, then every label over their KV cache
    alone = [engine.route(c) for c in conversations]
    assert [d.label for d in together] == [d.label for d in alone]
    for batched, single in zip(together, alone):
        assert batched.scores == pytest.approx(single.scores, abs=1e-4)


def test_rows_with_different_adapters_decode_as_each_would_alone(engine):
    records = train.synthetic_requests(8, seed=6)
    limits = [32, 3, 24, 32, 8, 32, 1, 16]
    rows = []
    for record, limit in zip(records, limits):
        label = record["label"]
        head, body = prompts.answer_text(record["messages"], label)
        rows.append(GenRow(engine.experts[label], engine.prompt(head, body, limit), limit))
    together = engine.generate_many(rows)
    alone = [engine.generate_many([row])[0] for row in rows]
    assert together == alone
    assert {g.finish_reason for g in together} == {"stop", "length"}
    assert [g.completion_tokens for g in together][6] == 1


def test_rows_are_grouped_so_that_prompt_and_answer_fit_the_positions():
    rows = [
        GenRow("a", [1] * 400, 100),
        GenRow("a", [1] * 10, 256),
        GenRow("a", [1] * 10, 8),
        GenRow("a", [1] * 300, 8),
    ]
    assert group_rows(rows, 512) == [[0, 2, 3], [1]]
    assert group_rows(rows, 10_000) == [[0, 1, 2, 3]]


# --- gathering ----------------------------------------------------------------------------


class FakeTicket:
    def __init__(self, n: int):
        self.n, self.cancelled, self.finished = n, False, None

    def finish(self, result, error=None):
        self.finished = (result, error)


def gathered(policy: BatchPolicy, count: int, run=None) -> list[list[int]]:
    batches: list[list[int]] = []
    scheduler = Scheduler(run or (lambda batch: batches.append([t.n for t in batch])), policy)
    for i in range(count):
        scheduler.submit(FakeTicket(i))
    wait_for(lambda: sum(map(len, batches)) == count)
    scheduler.close()
    return batches


def test_the_scheduler_gathers_within_its_window_up_to_its_limit():
    assert gathered(BatchPolicy(window=0.5, max_batch=4), 10) == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9],
    ]


def test_without_batching_turns_run_one_at_a_time_in_order():
    assert gathered(BatchPolicy.off(), 5) == [[0], [1], [2], [3], [4]]
    with pytest.raises(ValueError):
        BatchPolicy(window=0.1, max_batch=0)


def test_closing_refuses_the_turns_still_waiting():
    running, release = threading.Event(), threading.Event()

    def run(batch):
        running.set()
        release.wait(30)

    scheduler = Scheduler(run, BatchPolicy.off())
    first, second = FakeTicket(0), FakeTicket(1)
    scheduler.submit(first)
    running.wait(30)
    scheduler.submit(second)
    closer = threading.Thread(target=scheduler.close)
    closer.start()
    wait_for(lambda: second.finished is not None)
    assert isinstance(second.finished[1], NotServing)
    release.set()
    closer.join()
    with pytest.raises(NotServing):
        scheduler.submit(FakeTicket(2))


def test_a_failing_batch_fails_its_turns_and_the_next_batch_runs():
    ran = []

    def run(batch):
        if batch[0].n == 0:
            raise RuntimeError("model error")
        ran.append(batch[0].n)

    scheduler = Scheduler(run, BatchPolicy.off())
    tickets = [FakeTicket(0), FakeTicket(1)]
    for ticket in tickets:
        scheduler.submit(ticket)
    wait_for(lambda: ran == [1])
    scheduler.close()
    assert isinstance(tickets[0].finished[1], RuntimeError)


# --- a runtime that batches --------------------------------------------------------------------


def test_a_turn_finishes_on_the_version_it_was_submitted_to(demo, spec):
    degraded = make_spec(demo, router=adapter_files(demo.degraded_router))
    runtime = serving(demo.base, spec, batching=BatchPolicy(window=60, max_batch=2))
    try:
        first = runtime.submit(user("align button center"))
        runtime.update(degraded)  # while `first` waits for a second turn to fill the batch
        second = runtime.submit(user("align button center"))
        a, b = first.result(60), second.result(60)
    finally:
        runtime.close()
    assert (a.set_id, b.set_id) == (spec.id, degraded.id)
    assert (a.route, b.route) == ("ui", "coding")  # the degraded router swapped the two
    assert runtime.metrics.batches.count == 1 and runtime.metrics.batches.max == 2


def requests_of_client(client: int) -> list[dict]:
    """Three requests per client, routed and direct, spread over every expert and limit."""
    rng = random.Random(client)
    out = []
    for i in range(3):
        label = train.LABELS[(client + i) % len(train.LABELS)]
        model = "macaron" if (client + i) % 3 else label
        limit = (32, 8, 3, 24)[(client + 2 * i) % 4]
        text = train.synthetic_request(label, rng)
        out.append({"model": model, "messages": user(text), "max_tokens": limit})
    return out


def answer_of(body: dict) -> tuple:
    """What must not change between a batched and a sequential answer."""
    choice, mint = body["choices"][0], body["mint"]
    content, finish = choice["message"]["content"], choice["finish_reason"]
    return content, finish, body["usage"], mint["route"], mint["summary"], mint["set"]


def test_sixteen_concurrent_clients_get_their_sequential_answers(demo, spec):
    clients = {c: requests_of_client(c) for c in range(16)}
    sequential = serving(demo.base, spec, batching=BatchPolicy.off())
    with ServerThread(sequential) as url, httpx.Client(base_url=url, timeout=120) as http:
        expected = {
            (c, i): http.post("/v1/chat/completions", json=body).json()
            for c, bodies in clients.items()
            for i, body in enumerate(bodies)
        }
    sequential.close()
    assert {answer_of(b)[3] for b in expected.values()} == set(train.LABELS)

    runtime = serving(demo.base, spec, batching=BatchPolicy(window=0.05, max_batch=16))
    got, barrier = {}, threading.Barrier(16)

    def client(c: int, url: str) -> None:
        with httpx.Client(base_url=url, timeout=120) as http:
            for i, body in enumerate(clients[c]):
                barrier.wait(60)
                got[(c, i)] = http.post("/v1/chat/completions", json=body).json()

    with ServerThread(runtime) as url:
        threads = [threading.Thread(target=client, args=(c, url)) for c in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    runtime.close()
    assert set(got) == set(expected)
    for key, body in got.items():
        assert answer_of(body) == answer_of(expected[key]), key
    assert max(body["mint"]["batch"] for body in got.values()) > 1
    assert runtime.metrics.batches.max > 4
