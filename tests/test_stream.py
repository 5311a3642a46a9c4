"""Streaming: the openai client's stream=True against a real server, and the text deltas' rules."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from mint.examples import train
from mint.examples.tiny import build_adapter
from mint.runtime.batching import BatchPolicy
from mint.runtime.decoding import TextStream
from mint.runtime.errors import TurnCancelled
from mint.runtime.server import ServerThread

from support.runtime import adapter_files, make_spec, serving

REQUESTS = [  # (model, text, max_tokens): routed to every expert, direct, cut by the limit
    ("macaron", "please fix the python bug", 32),
    ("macaron", "align button center with css", 32),
    ("macaron", "book a flight and send email", 32),
    ("macaron", "hello friend , good morning", 32),
    ("ui", "hello friend", 32),
    ("macaron", "please fix the python bug", 3),
    ("joke", "tell me a story", 40),  # an untrained expert: never stops by itself
]


@pytest.fixture(scope="module")
def babbler(demo, tmp_path_factory):
    """The demo set plus `joke`, an untrained expert that talks until its token limit."""
    folder = build_adapter(demo.base, tmp_path_factory.mktemp("joke") / "joke", seed=11)
    experts = {label: adapter_files(p) for label, p in demo.experts.items()}
    return make_spec(demo, experts={**experts, "joke": adapter_files(folder)})


@pytest.fixture(scope="module")
def served(demo, babbler):
    runtime = serving(demo.base, babbler)
    with ServerThread(runtime) as url:
        yield url, runtime
    runtime.close()


def openai_client(url: str):
    import openai

    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)


def streamed(client, model: str, text: str, max_tokens: int) -> tuple[list, str]:
    """Every chunk of a streamed completion, and its deltas joined."""
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": text}],
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    joined = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return chunks, joined


@pytest.mark.parametrize(("model", "text", "max_tokens"), REQUESTS)
def test_the_openai_client_streams_the_non_streamed_answer(served, model, text, max_tokens):
    url, _ = served
    client = openai_client(url)
    whole = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": text}], max_tokens=max_tokens
    )
    chunks, joined = streamed(client, model, text, max_tokens)
    assert joined.encode() == whole.choices[0].message.content.encode()
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    first, finish, usage = chunks[0], chunks[-2], chunks[-1]
    assert first.choices[0].delta.role == "assistant"
    assert first.model_extra["mint"]["route"] == whole.model_extra["mint"]["route"]
    assert finish.choices[0].finish_reason == whole.choices[0].finish_reason
    assert finish.model_extra["mint"]["summary"] == whole.model_extra["mint"]["summary"]
    assert usage.choices == [] and usage.usage == whole.usage
    assert all(c.usage is None for c in chunks[:-1])
    assert len({c.id for c in chunks}) == 1


def test_the_wire_format_is_server_sent_events(served):
    url, _ = served
    body = {"model": "macaron", "messages": [{"role": "user", "content": "fix python bug"}]}
    with httpx.Client(base_url=url, timeout=60) as http:
        with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            events = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: ") for line in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: ") :]) for line in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[0]["mint"]["route"] == "coding" and chunks[0]["mint"]["direct"] is False
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + [
        "stop"
    ]
    assert "usage" not in chunks[-1]  # not asked for
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == train.ANSWERS["coding"]


def test_refusals_come_before_the_stream_as_json_errors(served):
    url, _ = served
    body = {"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    response = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"


def slow(runtime, seconds: float):
    """Make every forward pass of the runtime's base take at least `seconds` (a handle)."""
    return runtime.base._raw.register_forward_pre_hook(lambda *_: time.sleep(seconds))


def test_a_client_that_disconnects_mid_stream_frees_its_slot(demo, babbler):
    runtime = serving(demo.base, babbler, batching=BatchPolicy.off())
    hook = slow(runtime, 0.01)  # 256 tokens take seconds; a disconnect is seen in far less
    body = {
        "model": "joke",
        "messages": [{"role": "user", "content": "tell me a story"}],
        "max_tokens": 256,
        "stream": True,
    }
    try:
        with ServerThread(runtime) as url, httpx.Client(base_url=url, timeout=60) as http:
            with http.stream("POST", "/v1/chat/completions", json=body) as r:
                for line in r.iter_lines():
                    if '"content":"' in line and '"content":""' not in line:
                        break  # the first words: hang up
            deadline = time.monotonic() + 30
            while runtime.leases() or not runtime.metrics.cancelled_requests:
                assert time.monotonic() < deadline, "the turn kept its slot"
                time.sleep(0.02)
            assert runtime.metrics.completion_tokens < 256
            hook.remove()
            after = http.post("/v1/chat/completions", json={**body, "stream": False})
            assert after.status_code == 200 and after.json()["usage"]["completion_tokens"] == 256
    finally:
        hook.remove()
        runtime.close()
    assert runtime.metrics.cancelled_requests == 1


def test_a_cancelled_turn_stops_at_the_next_token(demo, babbler):
    runtime = serving(demo.base, babbler)
    events, first_text = [], threading.Event()

    def on_event(kind, value):
        events.append(kind)
        if kind == "text":
            first_text.set()

    try:
        ticket = runtime.submit(
            [{"role": "user", "content": "story"}],
            model="joke",
            max_new_tokens=256,
            on_event=on_event,
        )
        first_text.wait(30)
        ticket.cancel()
        with pytest.raises(TurnCancelled):
            ticket.result(30)
        assert events[0] == "route" and events[-1] == "cancelled"
        assert runtime.metrics.completion_tokens < 256 and runtime.leases() == 0
    finally:
        runtime.close()


# --- the text deltas ----------------------------------------------------------------------


class Recorder:
    def __init__(self):
        self.deltas: list[str] = []

    def __call__(self, delta: str) -> None:
        assert delta, "an empty delta was sent"
        self.deltas.append(delta)


def stream_ids(tokenizer, ids: list[int]) -> list[str]:
    """Push `ids` one by one, close with the stripped decode; the deltas sent."""
    sink = Recorder()
    stream = TextStream(tokenizer, sink)
    for token in ids:
        stream.push(token)
    stream.close(tokenizer.decode(ids, skip_special_tokens=True).strip())
    return sink.deltas


def byte_level_tokenizer():
    """A byte-level BPE tokenizer trained here, offline: characters outside its merges are
    split into single bytes, so a character spans several tokens."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        ["hello world, plain ascii text"] * 20, vocab_size=300, min_frequency=1
    )
    return PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer)


@pytest.mark.parametrize(
    "text",
    [
        "héllo wörld",
        "🙂 ∑ ünïcödé 日本語",
        "  leading and trailing  \n ",
        "tabs\tand  spaces  x",
        "é",
    ],
)
def test_deltas_hold_back_incomplete_characters_and_outer_whitespace(text):
    tokenizer = byte_level_tokenizer()
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) > len(text.split())  # characters really are split across tokens
    deltas = stream_ids(tokenizer, ids)
    assert "".join(deltas).encode() == text.strip().encode()
    assert not any("\ufffd" in d for d in deltas)
    assert not deltas or (not deltas[0][0].isspace() and not deltas[-1][-1].isspace())


def test_deltas_of_the_demo_tokenizer_join_to_the_answer(demo):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(demo.base)
    for answer in train.ANSWERS.values():
        ids = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        deltas = stream_ids(tokenizer, ids)
        assert "".join(deltas) == answer and len(deltas) == len(answer.split())


def test_a_stream_that_ends_in_whitespace_sends_none_of_it():
    class Spaces:  # decodes token i as the i-th piece
        pieces = ["  ", "a", " ", "b", " \n"]

        def decode(self, ids, skip_special_tokens=True):
            return "".join(self.pieces[i] for i in ids)

    deltas = stream_ids(Spaces(), list(range(5)))
    assert deltas == ["a", " b"]
