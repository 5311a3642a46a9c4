"""The HTTP server over a real runtime, called with plain httpx as an OpenAI client would."""

from __future__ import annotations

import httpx
import pytest

from mint.examples import train
from mint.runtime.server import ServerThread

from support.runtime import make_spec, serving


@pytest.fixture(scope="module")
def served(demo):
    spec = make_spec(demo)
    runtime = serving(demo.base, spec)
    server = ServerThread(runtime)
    with server as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client, runtime, spec
    runtime.close()


def chat(client, model="macaron", text="please fix the python bug", **extra):
    body = {"model": model, "messages": [{"role": "user", "content": text}], **extra}
    return client.post("/v1/chat/completions", json=body)


def assert_openai_error(response, status, code):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert error["message"] and error["type"]


def test_chat_completion_is_openai_shaped_and_names_route_and_set(served):
    client, _, spec = served
    response = chat(client)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "chat.completion" and body["model"] == "macaron"
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": train.ANSWERS["coding"]}
    assert choice["finish_reason"] in {"stop", "length"}
    assert (
        body["usage"]["total_tokens"]
        == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]
    )
    assert body["mint"]["route"] == "coding" and body["mint"]["set"] == spec.id
    assert body["mint"]["summary"] == "coding answer ."


def test_an_expert_can_be_called_directly(served):
    client, _, _ = served
    body = chat(client, model="ui", text="hello friend").json()
    assert body["mint"]["route"] == "ui" and body["mint"]["direct"] is True
    assert body["choices"][0]["message"]["content"] == train.ANSWERS["ui"]


def test_a_conversation_carries_routes_and_summaries_between_turns(served):
    client, _, _ = served
    messages = [{"role": "user", "content": "fix python bug"}]
    first = client.post(
        "/v1/chat/completions", json={"model": "macaron", "messages": messages}
    ).json()
    messages += [
        {**first["choices"][0]["message"], "mint": first["mint"]},
        {"role": "user", "content": "book a flight and send email"},
    ]
    second = client.post(
        "/v1/chat/completions", json={"model": "macaron", "messages": messages}
    ).json()
    assert (first["mint"]["route"], second["mint"]["route"]) == ("coding", "agent")


def test_models_lists_the_set_and_its_experts_with_commits(served):
    client, _, spec = served
    data = client.get("/v1/models").json()["data"]
    commits = {m["id"]: m["mint"]["commit"] for m in data}
    assert commits == {"macaron": spec.id, **{k: v.commit_id for k, v in spec.experts.items()}}
    assert all(m["object"] == "model" for m in data)


def test_healthz_reports_the_serving_commit(served):
    client, _, spec = served
    body = client.get("/healthz").json()
    assert body["status"] == "ok" and body["commit"] == spec.id and body["set"] == "macaron"


def test_metrics_report_routes_stages_and_swaps(served):
    client, _, spec = served
    chat(client, text="align button center")
    text = client.get("/metrics").text
    assert 'mint_requests_total{route="ui"}' in text
    for stage in ("route", "answer", "summary", "total"):
        assert f'mint_stage_latency_seconds_count{{stage="{stage}"}}' in text
    assert "mint_swaps_total 1" in text and "mint_swaps_failed_total 0" in text
    assert f'mint_serving_info{{set="macaron",commit="{spec.id}"}} 1' in text


def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(served):
    client, _, _ = served
    headers = {"content-type": "application/json"}
    assert_openai_error(
        client.post("/v1/chat/completions", content=b"{not json", headers=headers),
        400,
        "invalid_json",
    )
    assert_openai_error(
        client.post("/v1/chat/completions", content=b"\xff\xfe", headers=headers),
        400,
        "invalid_json",
    )
    assert_openai_error(chat(client, model="gpt-4"), 404, "model_not_found")
    empty = client.post("/v1/chat/completions", json={"model": "macaron", "messages": []})
    assert_openai_error(empty, 400, "empty_messages")
    only_system = client.post(
        "/v1/chat/completions",
        json={"model": "macaron", "messages": [{"role": "system", "content": "hi"}]},
    )
    assert_openai_error(only_system, 400, "empty_messages")
    huge = client.post(
        "/v1/chat/completions",
        content=b'{"model": "macaron", "x": "' + b"a" * (2 << 20) + b'"}',
        headers=headers,
    )
    assert_openai_error(huge, 413, "request_too_large")
    assert_openai_error(client.post("/v1/chat/completions", json=[1, 2]), 400, "invalid_request")
    assert_openai_error(
        client.post("/v1/chat/completions", json={"messages": [{"role": "user"}]}),
        400,
        "missing_model",
    )
    bad_role = {"model": "macaron", "messages": [{"role": "wizard", "content": "hi"}]}
    assert_openai_error(
        client.post("/v1/chat/completions", json=bad_role), 400, "invalid_messages"
    )
    assert_openai_error(chat(client, max_tokens=10**6), 400, "invalid_max_tokens")
    assert_openai_error(chat(client, stream="yes"), 400, "invalid_stream")
    assert_openai_error(
        chat(client, stream=True, stream_options=[1]), 400, "invalid_stream_options"
    )
    assert_openai_error(client.get("/v1/nothing"), 404, "not_found")
    assert_openai_error(client.get("/v1/chat/completions"), 405, "method_not_allowed")
    assert chat(client).status_code == 200
    assert 'mint_request_errors_total{status="400"}' in client.get("/metrics").text


def test_deeply_nested_json_is_refused_with_a_4xx(served):
    client, runtime, _ = served
    headers = {"content-type": "application/json"}
    depth = 100_000  # 200 KB: under the body limit, far past any parser's recursion limit
    arrays = b'{"model": "macaron", "messages": ' + b"[" * depth + b"]" * depth + b"}"
    objects = b'{"model": "macaron", "x": ' + b'{"a": ' * depth + b"1" + b"}" * depth + b"}"
    just_past = b'{"model": "macaron", "messages": ' + b"[" * 64 + b"]" * 64 + b"}"
    nested_content = {
        "model": "macaron",
        "messages": [{"role": "user", "content": [{"type": "text", "text": [[[[[[[[]]]]]]]]}]}],
    }
    for body in (arrays, objects, just_past):
        response = client.post("/v1/chat/completions", content=body, headers=headers)
        assert_openai_error(response, 400, "too_deep")
    reply = client.post("/v1/chat/completions", json=nested_content)
    assert reply.status_code < 500, reply.text
    assert 'mint_request_errors_total{status="500"}' not in client.get("/metrics").text
    assert chat(client).status_code == 200


def test_oversized_body_without_content_length_is_refused(served):
    client, _, _ = served

    def chunks():
        yield b'{"model": "macaron", "x": "'
        for _ in range(20):
            yield b"a" * (128 << 10)
        yield b'"}'

    assert_openai_error(
        client.post("/v1/chat/completions", content=chunks()), 413, "request_too_large"
    )
    assert client.get("/healthz").status_code == 200


def test_the_openai_client_talks_to_it(served):
    import openai

    client, _, spec = served
    oa = openai.OpenAI(base_url=str(client.base_url) + "/v1", api_key="unused", max_retries=0)
    assert {m.id for m in oa.models.list().data} == {"macaron", *spec.experts}
    reply = oa.chat.completions.create(
        model="macaron",
        messages=[{"role": "user", "content": "please fix the python bug"}],
        max_tokens=12,
    )
    assert reply.choices[0].message.content == train.ANSWERS["coding"]
    assert reply.model_extra["mint"]["route"] == "coding"
    with pytest.raises(openai.NotFoundError):
        oa.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}])


def test_serve_takes_batching_and_tier_options():
    from mint.cli import run_in_process

    code, out, _ = run_in_process(["serve", "--help"])
    assert code == 0
    for option in ("--batch-window-ms", "--max-batch", "--no-batching", "--max-cpu-adapters"):
        assert option in out
    for bad in (["--max-batch", "0"], ["--batch-window-ms", "-1"], ["--max-cpu-adapters", "-2"]):
        code, _, err = run_in_process(["serve", "macaron", *bad])
        assert code == 2 and bad[0] in err
