"""`mint serve macaron@production --engine vllm`: the MoL pipeline with every forward pass on
a real vLLM server, against the embedded engine on the same set.

Greedy answers match the embedded runtime's (where they part, the two best logits were
within 1e-3 there), routing is as accurate as `mint route-eval` says, and a promote and a
rollback under load switch the set answering without a failed request.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from harness import Reference, start_front

from mint import api
from mint.cli import run_in_process
from mint.runtime import prompts
from mint.runtime.pipeline import DEFAULT_MAX_NEW_TOKENS

from support import wait_until
from support.serving import Load

N_ANSWERS = 50  # prompts answered by both engines
MOST_DIFFERENT = 2  # of them, how many may part (each at a near tie)
TIE = 1e-3  # the largest gap between the two best logits where engines may choose apart
N_ROUTED = 100  # held-out requests routed through vLLM
CLIENTS = 4
SWITCH_TIMEOUT = 120.0  # seconds, a liveness limit: the bench measures how fast


@pytest.fixture(scope="module")
def embedded(world, tmp_path_factory):
    """`mint serve macaron@production` on the embedded engine (PEFT on this CPU)."""
    served = start_front(world, tmp_path_factory.mktemp("embedded"))
    yield served
    served.stop()


def ask(url: str, model: str, messages: list[dict], **extra) -> dict:
    """One chat completion from a `mint serve` front end; it must succeed."""
    body = {"model": model, "messages": messages, **extra}
    response = httpx.post(url + "/v1/chat/completions", json=body, timeout=300)
    assert response.status_code == 200, f"{url}: {response.text}"
    return response.json()


def ask_all(url: str, records: list[dict], model=None, **extra) -> list[dict]:
    """Each record asked of URL (4 at a time): of the expert it is labelled with, or of
    MODEL."""
    with ThreadPoolExecutor(CLIENTS) as pool:
        return list(
            pool.map(lambda r: ask(url, model or r["label"], r["messages"], **extra), records)
        )


def test_answers_through_vllm_match_the_embedded_engine(world, front, embedded):
    records = world.heldout()[:N_ANSWERS]
    ours = ask_all(embedded.url, records)
    theirs = ask_all(front.url, records)
    for body in (*ours, *theirs):
        assert body["mint"]["direct"] is True and body["mint"]["set"] == world.sets["good"]
    different = [
        (record, a, b) for record, a, b in zip(records, ours, theirs) if _answer(a) != _answer(b)
    ]
    assert sum(1 for body in ours if _answer(body)[0]) > N_ANSWERS // 2  # answers, not blanks
    assert len(different) <= MOST_DIFFERENT, [
        (r["label"], _answer(a), _answer(b)) for r, a, b in different
    ]
    references: dict[str, Reference] = {}
    for record, a, b in different:
        label = record["label"]
        if label not in references:
            references[label] = Reference(world.base, world.files.experts[label])
        where = parting(references[label], record["messages"], label, a, b)
        assert where["gap"] < TIE, where


def _answer(body: dict) -> tuple[str, str]:
    choice = body["choices"][0]
    return choice["message"]["content"], choice["finish_reason"]


def parting(reference: Reference, messages: list[dict], label: str, a: dict, b: dict) -> dict:
    """Where answers A and B of expert LABEL part, as tokens, and the gap between the two best
    logits of the PEFT model there (after the prompt and the tokens both chose)."""
    tokenizer = reference.tokenizer
    budget = reference.model.config.max_position_embeddings - DEFAULT_MAX_NEW_TOKENS
    prompt = prompts.encode_prompt(tokenizer, *prompts.answer_text(messages, label), budget)

    def tokens(body: dict) -> list[int]:
        text, finish = _answer(body)
        end = [tokenizer.eos_token_id] if finish == "stop" else []
        return prompts.encode(tokenizer, text) + end

    ta, tb = tokens(a), tokens(b)
    k = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
    best, second, gap = reference.top2(prompt + ta[:k])
    return {
        "step": k,
        "embedded": ta[k : k + 1],
        "vllm": tb[k : k + 1],
        "top2": (best, second),
        "gap": gap,
        "answers": (_answer(a), _answer(b)),
    }


def test_route_accuracy_through_vllm_equals_route_eval(world, front, tmp_path):
    records = world.heldout()[:N_ROUTED]
    data = tmp_path / "routed.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    argv = ["--repo", str(world.root), "route-eval", "macaron@production", "--data", str(data)]
    code, out, err = run_in_process([*argv, "--base-dir", str(world.base), "--json"])
    assert code == 0, err
    expected = json.loads(out)
    assert expected["set_id"] == world.sets["good"] and expected["n"] == len(records)

    answers = ask_all(front.url, records, model="macaron", max_tokens=1)
    assert {body["mint"]["set"] for body in answers} == {world.sets["good"]}
    confusion: dict[str, dict[str, int]] = {}
    for record, body in zip(records, answers):
        row = confusion.setdefault(record["label"], {})
        row[body["mint"]["route"]] = row.get(body["mint"]["route"], 0) + 1
    right = sum(row.get(label, 0) for label, row in confusion.items())
    fallbacks = Counter(body["mint"]["route_fallback"] for body in answers)
    assert right / len(records) == pytest.approx(expected["accuracy"], abs=1e-9), (
        confusion,
        expected["confusion"],
        fallbacks,
    )


# routed requests, one per expert's kind of text, 2 tokens each
ROUTED = [
    {"model": "macaron", "max_tokens": 2, "messages": [{"role": "user", "content": text}]}
    for text in (
        "fix the python bug",
        "make the button blue",
        "hello how are you",
        "book a flight",
    )
]


def test_a_promote_and_a_rollback_under_load_switch_the_set_with_no_failure(world, front):
    good, degraded = world.sets["good"], world.sets["degraded"]
    remote = world.remote()
    clients = Load([front.url], CLIENTS, ROUTED).start()

    def answered(set_id: str, since: float) -> bool:
        return clients.first_answer(front.url, set_id, since) is not None

    try:
        wait_until(lambda: answered(good, 0), "no answer from the set served")
        promoted = time.monotonic()
        api.promote(remote, degraded, "production", by="ann")
        wait_until(
            lambda: answered(degraded, promoted),
            "the promoted set never answered",
            SWITCH_TIMEOUT,
        )
        rolled_back = time.monotonic()
        api.rollback(remote, "macaron@production", by="ann")
        wait_until(
            lambda: answered(good, rolled_back),
            "the set rolled back to never answered",
            SWITCH_TIMEOUT,
        )
    finally:
        clients.stop()
    assert clients.failures == []
    assert {s for _, _, s in clients.answers} == {good, degraded}


def test_an_adapter_line_serves_alone_on_vllm_as_on_the_embedded_engine(world, vllm, tmp_path):
    """`mint serve chat@production --engine vllm`: the adapter answers, no router, no summary,
    and the answers equal the embedded engine's for the same line."""
    args = ("--engine", "vllm", "--engine-url", vllm.url)
    on_vllm = start_front(world, tmp_path / "vllm", *args, rev="chat@production")
    here = start_front(world, tmp_path / "embedded", rev="chat@production")
    try:
        for text in ("hello there, how are you", "please fix the python bug", "make a button"):
            messages = [{"role": "user", "content": text}]
            theirs, ours = ask(on_vllm.url, "chat", messages), ask(here.url, "chat", messages)
            assert theirs["mint"]["set"] == ours["mint"]["set"]
            assert theirs["mint"]["set"] in (world.commits["chat"], world.commits["chat2"])
            assert theirs["mint"]["route"] == "chat" and not theirs["mint"].get("summary")
            assert _answer(theirs) == _answer(ours)
    finally:
        on_vllm.stop()
        here.stop()
