"""An adapter line served alone: `mint serve chat@production`, where chat is an adapter line,
answers with that adapter (the PEFT model's greedy answer), runs no router and writes no
summary, lists the line in /v1/models, traces its turns under the adapter's commit, and
follows the channel: a promote of another adapter commit swaps it in, a rollback back.
A set on the same repository still serves as before; a revision that names nothing is one
line and a non-zero exit.

Through a real `mint serve` process on a local repository, and an in-process runtime over
HTTP where the test looks inside (which adapters ran).
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import httpx
import pytest

from mint import api
from mint.errors import RevisionNotFound
from mint.examples import train
from mint.runtime import prompts
from mint.runtime.loader import adapter_name

from conftest import Result, one_line_error
from support import wait_until
from support.runtime import committed_demo
from support.serving import _start as start_process

REF = "chat@production"
ME = "ann"
TEXTS = ("hello friend , how are you", "please fix the python bug", "book a flight")
MAX_TOKENS = 12


@pytest.fixture(scope="module")
def served(demo, tmp_path_factory):
    """The demo committed (its set on macaron@production), the chat expert's commit on
    chat@production, a runtime following chat@production in this process over HTTP, and a
    commit of the agent expert's weights on line chat (to promote)."""
    from mint.runtime.server import ServerThread
    from mint.runtime.service import open_runtime

    root = tmp_path_factory.mktemp("single")
    repo, _ = api.init(root / "repo")
    ids = committed_demo(repo, demo, root / "set")
    chat = api.resolve(repo, "chat")
    api.promote(repo, chat, "production", by=ME)
    agent = api.commit(repo, "chat", demo.experts["agent"], "agent's weights", author=ME).id
    runtime = open_runtime(repo, REF, str(demo.base), poll_interval=0.05)
    runtime.follow()
    try:
        with ServerThread(runtime) as url, httpx.Client(base_url=url, timeout=120) as client:
            yield SimpleNamespace(
                repo=repo, root=root, runtime=runtime, client=client, files=demo,
                set=ids["set"], chat=chat, agent=agent,
            )  # fmt: skip
    finally:
        runtime.close()
        repo.close()


@pytest.fixture(scope="module")
def greedy(demo):
    """greedy(folder, text): the answer of PEFT's own model for the adapter in FOLDER on the
    base, decoded greedily from the prompt the expert sees (MAX_TOKENS at most)."""
    import torch
    from peft import PeftModel

    from mint.examples.tiny import load_base

    cache: dict = {}

    def answer(folder, text: str) -> str:
        if folder not in cache:
            model, tokenizer = load_base(demo.base)
            cache[folder] = (PeftModel.from_pretrained(model, folder).eval(), tokenizer)
        model, tokenizer = cache[folder]
        head, body = prompts.answer_text([{"role": "user", "content": text}], "chat")
        ids = prompts.encode_prompt(tokenizer, head, body, 10_000)
        with torch.inference_mode():
            out = model.generate(
                input_ids=torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=MAX_TOKENS,
                do_sample=False,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
            )
        new = out[0, len(ids) :].tolist()
        if tokenizer.eos_token_id in new:
            new = new[: new.index(tokenizer.eos_token_id)]
        return tokenizer.decode(new, skip_special_tokens=True).strip()

    return answer


def ask(client, text: str, model: str = "chat", **extra) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": text}], **extra}
    body.setdefault("max_tokens", MAX_TOKENS)
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def answer_of(body: dict) -> str:
    return body["choices"][0]["message"]["content"]


def test_mint_serve_answers_with_the_adapter_and_follows_its_channel(served, greedy, tmp_path):
    s = served
    argv = [sys.executable, "-m", "mint", "--repo", str(s.repo.root), "serve", REF]
    server = start_process([*argv, "--base-dir", str(s.files.base)], tmp_path, {})
    try:
        assert server.health()["commit"] == s.chat
        with server.client() as client:
            listed = client.get("/v1/models").json()["data"]
            assert [(m["id"], m["mint"]) for m in listed] == [
                ("chat", {"kind": "adapter", "commit": s.chat})
            ]
            for text in TEXTS:
                body = ask(client, text)
                assert answer_of(body) == greedy(s.files.experts["chat"], text), text
                assert (body["model"], body["mint"]["set"]) == ("chat", s.chat)
                assert (body["mint"]["route"], body["mint"]["summary"]) == ("chat", "")
            hello = TEXTS[0]
            assert answer_of(ask(client, hello)) == train.ANSWERS["chat"]
            # the channel moves to another commit of the line: the server swaps it in
            api.promote(s.repo, s.agent, "production", by=ME)
            wait_until(lambda: server.health()["commit"] == s.agent, "no swap to the promote")
            body = ask(client, hello)
            assert body["mint"]["set"] == s.agent
            assert answer_of(body) == greedy(s.files.experts["agent"], hello)
            assert answer_of(body) != train.ANSWERS["chat"]
            api.rollback(s.repo, REF, by=ME)
            wait_until(lambda: server.health()["commit"] == s.chat, "no swap to the rollback")
            assert ask(client, hello)["mint"]["set"] == s.chat
            wait_until(lambda: s.runtime.active.id == s.chat, "the runtime did not follow")
    finally:
        assert server.stop() == 0, server.output()[-3000:]
    assert "Traceback" not in server.output()


def test_no_router_and_no_summary_run(served, monkeypatch):
    s = served
    engine = s.runtime.active
    name = adapter_name(s.chat)
    assert engine.spec.single and engine.id == s.chat
    assert engine.adapter_names() == [name]
    assert {k for k, n in s.runtime.base.loaded().items() if n} == {name}
    rows, routed = [], []
    generate_each = engine.generate_each
    monkeypatch.setattr(
        engine, "generate_each", lambda r, b=None: rows.extend(r) or generate_each(r, b)
    )
    monkeypatch.setattr(engine, "route_many", lambda c: routed.append(c))
    body = ask(s.client, "please fix the python bug")
    assert [row.adapter for row in rows] == [name]  # one answer row; no summary row
    assert routed == []
    mint = body["mint"]
    assert (mint["route"], mint["set_name"], mint["summary"]) == ("chat", "chat", "")
    assert mint["direct"] is True and mint["route_fallback"] is None
    monkeypatch.undo()
    # asked directly, the engine routes without touching a model
    monkeypatch.setattr(engine.base, "using", None)
    decisions = engine.route_many([[{"role": "user", "content": "fix the bug"}]] * 3)
    assert [(d.label, d.fallback, d.probs()) for d in decisions] == [("chat", None, {})] * 3


def test_models_lists_the_line_and_the_served_revision_is_taken(served):
    s = served
    listed = s.client.get("/v1/models").json()
    assert listed["data"] == [
        {
            "id": "chat",
            "object": "model",
            "created": 0,
            "owned_by": "chat",
            "mint": {"kind": "adapter", "commit": s.chat},
        }
    ]
    same = ask(s.client, "hello friend", model=REF)
    assert same["model"] == REF and same["mint"]["set"] == s.chat
    assert answer_of(same) == answer_of(ask(s.client, "hello friend"))
    for other in ("chat@v1", "macaron", "coding", "chat@staging"):
        body = {"model": other, "messages": [{"role": "user", "content": "hi"}]}
        response = s.client.post("/v1/chat/completions", json=body)
        assert response.status_code == 404, (other, response.text)
        assert response.json()["error"]["code"] == "model_not_found"


def test_a_streamed_answer_is_the_same(served):
    s = served
    body = {
        "model": "chat",
        "messages": [{"role": "user", "content": "hello friend"}],
        "max_tokens": MAX_TOKENS,
        "stream": True,
    }
    import json

    with s.client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == answer_of(ask(s.client, "hello friend"))
    assert chunks[0]["mint"]["route"] == "chat" and chunks[0]["mint"]["set"] == s.chat


def test_a_turn_is_traced_under_the_adapter_commit(served):
    s = served
    body = ask(s.client, "hello friend", user="ann")
    s.runtime.recorder.flush()
    (trace,) = [t for t in api.traces_ls(s.repo, limit=None) if t.id == body["id"]]
    assert (trace.set_line, trace.set_commit, trace.expert_commit) == ("chat", s.chat, s.chat)
    assert (trace.label, trace.variant, trace.probs) == ("chat", "production", None)
    assert trace.response == answer_of(body)
    ok = s.client.post("/v1/feedback", json={"id": body["id"], "score": 0.75})
    assert ok.status_code == 200, ok.text
    assert [t.id for t in api.traces_ls(s.repo, set_rev=REF)][:1] == [trace.id]


def test_a_set_still_serves_as_before(served):
    from mint.runtime.service import open_runtime

    s = served
    spec = api.set_spec(s.repo, "macaron@production")
    assert not spec.single and spec.id == s.set and len(spec.labels) == 4
    assert spec.route_prompt and spec.summary_prompt and spec.router != spec.summary
    single = api.set_spec(s.repo, REF)
    assert single.single and single.labels == ["chat"] and single.default == "chat"
    assert single.router == single.summary == single.experts["chat"]
    assert single.router.line == "chat" and single.base_fingerprint == spec.base_fingerprint
    assert set(single.blobs) == set(single.router.blobs)
    runtime = open_runtime(s.repo, "macaron@production", str(s.files.base), traces=False)
    try:
        result = runtime.turn([{"role": "user", "content": "please fix the python bug"}])
    finally:
        runtime.close()
    assert (result.set_id, result.route) == (s.set, "coding")
    assert result.answer == train.ANSWERS["coding"] and result.summary
    assert set(result.probs) == set(spec.labels)


def test_what_names_no_adapter_or_set_is_one_line(served):
    from mint.cli import run_in_process

    s = served
    (s.root / "quality.toml").write_text(
        'name = "quality"\nchannel = "staging"\n[[metric]]\nname = "score"\nmin = 0.5\n'
    )
    api.contract_add(s.repo, s.root / "quality.toml", by=ME)
    for rev in ("quality", "nosuch@production", "chat@nosuch"):
        with pytest.raises(RevisionNotFound):
            api.set_spec(s.repo, rev)
        argv = ["--repo", str(s.repo.root), "serve", rev, "--base-dir", str(s.files.base)]
        one_line_error(Result(*run_in_process(argv)))
