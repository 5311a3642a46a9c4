"""One request cannot hurt another's: through a real `mint serve` process over the tiny demo
MoL, a request whose text no tokenizer takes is refused alone (400, the field named) while the
requests sent with it are answered; parameters mint cannot honour or values of the wrong kind
get a 400 naming them, on a connection that stays open; a prompt of 900 KB is answered, cut to
the budget. Below the server, a turn that reaches a batch and cannot be tokenized or decoded
fails alone while its batch-mates are answered.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from mint import api
from mint.runtime import prompts
from mint.runtime.batching import BatchPolicy
from mint.runtime.decoding import GenRow

from support import free_port
from support.runtime import make_spec, serving

pytestmark = pytest.mark.xdist_group("demo")

ME = "tester"
START_TIMEOUT = 240.0  # seconds: a liveness limit on a busy two-core machine, not a timing test
GOOD = "please fix the python bug"


def build_repo(root: Path, files) -> Path:
    """The demo MoL committed in a new repository, its set on macaron@production."""
    from mint.examples.demo import MOL

    repo, _ = api.init(root / "repo")
    api.base_add(repo, "tiny-llama", files.base)
    for label, folder in files.experts.items():
        api.commit(repo, label, folder, label, author=ME)
        api.tag(repo, "v1", label, by=ME)
    folder = root / "set"
    folder.mkdir()
    for src in (files.route_prompt, files.summary_prompt):
        (folder / src.name).write_bytes(src.read_bytes())
    router = api.commit(repo, "router", files.router, "router", author=ME).id
    (folder / "mol.toml").write_text(MOL.format(router=router))
    api.promote(
        repo, api.set_commit(repo, folder / "mol.toml", "set", author=ME).id, "production", by=ME
    )
    repo.close()
    return root / "repo"


class ServeProcess:
    """`python -m mint --repo ROOT serve macaron@production --base-dir BASE ...EXTRA` in its
    own process (torch on one thread); `stop()` ends it."""

    def __init__(self, root: Path, base: Path, folder: Path, *extra: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / f"serve-{self.port}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("MINT_")}
        env.update(OMP_NUM_THREADS="1", XDG_CONFIG_HOME=str(folder / "config"))
        argv = ["--repo", str(root), "serve", "macaron@production", "--base-dir", str(base)]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mint", *argv, "--port", str(self.port), *extra],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while not self._healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"mint serve did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)

    def _healthy(self) -> bool:
        try:
            return httpx.get(self.url + "/healthz", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def served(demo, tmp_path_factory):
    """A real `mint serve` that gathers requests for up to 200 ms into one batch."""
    tmp = tmp_path_factory.mktemp("isolation")
    server = ServeProcess(build_repo(tmp, demo), demo.base, tmp, "--batch-window-ms", "200")
    yield server
    server.stop()


def chat_body(text: str = GOOD, **extra) -> dict:
    return {"model": "macaron", "messages": [{"role": "user", "content": text}], **extra}


def post_raw(url: str, body: bytes, path: str = "/v1/chat/completions") -> httpx.Response:
    headers = {"content-type": "application/json"}
    return httpx.post(url + path, content=body, headers=headers, timeout=120)


def together(url: str, bodies: list[bytes]) -> list[httpx.Response]:
    """Send every body at once (one thread each, released together), so that they batch."""
    replies: list[httpx.Response | None] = [None] * len(bodies)
    barrier = threading.Barrier(len(bodies))

    def send(i: int) -> None:
        barrier.wait(60)
        replies[i] = post_raw(url, bodies[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return replies  # type: ignore[return-value]


# --- through the server --------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["\ud800 hi", "fix the bug \udfff", "nul \x00 inside"])
def test_bad_text_is_refused_alone_and_its_batch_mates_are_answered(served, bad):
    good = json.dumps(chat_body()).encode()
    # json.dumps writes a lone surrogate as the escape `\ud800`, as a client's JSON would
    bodies = [good] * 3 + [json.dumps(chat_body(bad)).encode()] + [good] * 3
    replies = together(served.url, bodies)
    answered = [r for i, r in enumerate(replies) if i != 3]
    assert [r.status_code for r in answered] == [200] * 6, [r.text for r in answered]
    refused = replies[3]
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["param"] == "messages[0].content" and error["code"] == "invalid_text"
    assert {r.json()["mint"]["route"] for r in answered} == {"coding"}
    assert max(r.json()["mint"]["batch"] for r in answered) > 1  # they did run together


def _raw(body: str) -> bytes:
    return body.encode()


HUGE = "9" * 5000
MESSAGES = '"messages": [{"role": "user", "content": "fix the bug"}]'
REFUSED = [  # (body, the param the 400 must name)
    (_raw('{"model": "macaron", "messages": [{"role": ["user"], "content": "hi"}]}'),
     "messages[0].role"),
    (_raw('{"model": "macaron", "messages": [{"role": {"a": 1}, "content": "hi"}]}'),
     "messages[0].role"),
    (_raw(f'{{"model": "macaron", {MESSAGES}, "max_tokens": {HUGE}}}'), "max_tokens"),
    (_raw(f'{{"model": "macaron", {MESSAGES}, "seed": -{HUGE}}}'), "seed"),
    (_raw(f'{{"model": "macaron", {MESSAGES}, "n": 5}}'), "n"),
    (_raw(f'{{"model": "macaron", {MESSAGES}, "n": "2"}}'), "n"),
    (_raw(f'{{"model": "macaron", {MESSAGES}, "temperature": NaN}}'), "temperature"),
    (_raw(f'{{"model": "macaron", {MESSAGES}, "temperature": Infinity}}'), "temperature"),
    (_raw(f'{{"model": "macaron", {MESSAGES}, "temperature": 1e400}}'), "temperature"),
    (_raw(f'{{"model": "macaron", {MESSAGES}, "temperature": -0.5}}'), "temperature"),
    (_raw(f'{{"model": "macaron", {MESSAGES}, "temperature": "hot"}}'), "temperature"),
    (_raw(f'{{"model": "macaron", {MESSAGES}, "top_p": 7}}'), "top_p"),
    (_raw(f'{{"model": "macaron", {MESSAGES}, "stop": ["\\n"]}}'), "stop"),
    (_raw(f'{{"model": "macaron", {MESSAGES}, "tools": [{{"type": "function"}}]}}'), "tools"),
    (_raw(f'{{"model": "macaron", {MESSAGES}, "tool_choice": "auto"}}'), "tool_choice"),
    (_raw(f'{{"model": "macaron", {MESSAGES}, "functions": [{{"name": "f"}}]}}'), "functions"),
    (_raw(f'{{"model": "macaron", {MESSAGES}, "logprobs": true}}'), "logprobs"),
    (_raw(f'{{"model": "macaron", {MESSAGES}, "user": "a\\u0000b"}}'), "user"),
    (_raw('{"model": "macaron", "messages": [{"role": "user", "content": 5}]}'),
     "messages[0].content"),
    (_raw('{"model": "macaron", "messages": [{"role": "user", "content": '
          '[{"type": "image_url", "image_url": {"url": "x"}}]}]}'), "messages[0].content[0]"),
]  # fmt: skip


def test_parameters_mint_cannot_honour_get_a_400_naming_them_on_a_kept_connection(served):
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=120)
    headers = {"content-type": "application/json"}
    conn.connect()
    sock = conn.sock
    try:
        for body, param in REFUSED:
            conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
            reply = conn.getresponse()
            payload = json.loads(reply.read())
            assert reply.status == 400, (param, payload)
            assert payload["error"]["param"] == param, payload
            assert param in payload["error"]["message"], payload
            assert conn.sock is sock, f"the connection was closed after the {param} case"
        huge_score = f'{{"id": "chatcmpl-1", "score": {HUGE}}}'.encode()
        conn.request("POST", "/v1/feedback", body=huge_score, headers=headers)
        reply = conn.getresponse()
        assert reply.status == 400 and json.loads(reply.read())["error"]["param"] == "score"
        fine = chat_body(n=1, temperature=0.7, top_p=1, stop=None, tools=[], seed=3)
        conn.request("POST", "/v1/chat/completions", body=json.dumps(fine), headers=headers)
        reply = conn.getresponse()
        assert reply.status == 200 and conn.sock is sock
        assert len(json.loads(reply.read())["choices"]) == 1
    finally:
        conn.close()
    metrics = httpx.get(served.url + "/metrics").text
    assert 'mint_request_errors_total{status="500"}' not in metrics


def test_a_prompt_of_900_kb_is_answered_cut_to_the_budget(served):
    text = "hello " * 150_000 + GOOD  # 900 KB, under the 1 MiB body limit
    reply = httpx.post(
        served.url + "/v1/chat/completions", json=chat_body(text, max_tokens=12), timeout=120
    )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    # the tiny base has 512 positions: BOS and the newest 499 tokens of the prompt, 12 to answer
    assert body["usage"]["prompt_tokens"] == 512 - 12
    assert body["choices"][0]["message"]["content"]


# --- below the server: a batch with a turn that cannot run ---------------------------------


def test_a_turn_the_tokenizer_refuses_fails_alone_in_its_batch(demo):
    spec = make_spec(demo)
    runtime = serving(demo.base, spec, batching=BatchPolicy(window=60, max_batch=5))
    events: list[tuple[str, object]] = []
    try:
        good = [runtime.submit([{"role": "user", "content": GOOD}]) for _ in range(2)]
        bad = runtime.submit(  # the server refuses this text; a library caller may not
            [{"role": "user", "content": "\ud800 hi"}], on_event=lambda *e: events.append(e)
        )
        good += [runtime.submit([{"role": "user", "content": GOOD}]) for _ in range(2)]
        answers = [ticket.result(120) for ticket in good]  # the fifth turn started the batch
        with pytest.raises(Exception) as caught:
            bad.result(120)
    finally:
        runtime.close()
    assert [a.batch for a in answers] == [5] * 4
    assert {a.route for a in answers} == {"coding"} and all(a.answer for a in answers)
    from mint.runtime.isolation import UnusableTurn

    assert isinstance(caught.value, UnusableTurn)
    assert events[-1][0] == "error" and isinstance(events[-1][1], UnusableTurn)
    assert runtime.leases() == 0  # every turn gave its version back


def test_a_row_that_breaks_decoding_is_retried_and_fails_alone(demo):
    from mint.runtime.engine import load_engine
    from mint.runtime.loader import SharedBase

    engine = load_engine(SharedBase.load(demo.base), make_spec(demo))
    try:
        head, body = prompts.answer_text([{"role": "user", "content": GOOD}], "coding")
        prompt = engine.prompt(head, body, 8)
        streamed: list[list[str]] = [[], [], []]
        rows = [
            GenRow(engine.experts["coding"], prompt, 8, streamed[0].append),
            GenRow(engine.experts["ui"], prompt[:-1] + [10**6], 8, streamed[1].append),
            GenRow(engine.experts["chat"], prompt, 8, streamed[2].append),
        ]
        got = engine.generate_each(rows)
        alone = [engine.generate_many([GenRow(r.adapter, r.prompt, 8)])[0] for r in rows[::2]]
        # the failed mixed-adapter call left no per-row hooks behind to break later batches
        after = engine.generate_many([GenRow(r.adapter, r.prompt, 8) for r in rows[::2]])
    finally:
        engine.close()
    assert isinstance(got[1], IndexError)  # a token id past the vocabulary
    assert [got[0], got[2]] == alone == after
    # the retry streamed each row again, but no client sees its text twice
    assert ["".join(streamed[0]), "".join(streamed[2])] == [g.text for g in alone]


def test_the_end_of_a_long_text_is_tokenized_as_the_whole_text_would_be(demo):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(demo.base)
    words = "please fix the python bug and book a flight then send email".split()
    text = " ".join(words[i % len(words)] for i in range(200_000))
    for room in (1, 7, 300):
        assert (
            prompts.encode_tail(tokenizer, text, room) == prompts.encode(tokenizer, text)[-room:]
        )
    short = "fix the bug"
    assert prompts.encode_tail(tokenizer, short, 300) == prompts.encode(tokenizer, short)
