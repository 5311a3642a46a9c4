"""A vLLM server that stops and comes back: the front end answers 503 with one line while it
is down (never a 500), and serves again, unchanged, once it restarts on the same port: the
restarted server loads what it is asked for through mint's plugin."""

from __future__ import annotations

import httpx
from harness import start_front, start_vllm, vllm_python

MESSAGES = [{"role": "user", "content": "please fix the python bug"}]


def ask(url: str) -> httpx.Response:
    body = {"model": "chat", "messages": MESSAGES}
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=300)


def test_a_front_end_survives_a_vllm_restart(world, tmp_path):
    env = {"MINT_REPO": world.registry.url, "MINT_TOKEN": world.tokens["admin"]}
    first = start_vllm(vllm_python(), world.base, tmp_path / "first", env)
    port = int(first.url.rsplit(":", 1)[1])
    front = start_front(world, tmp_path / "front", "--engine", "vllm", "--engine-url", first.url)
    second = None
    try:
        before = ask(front.url)
        assert before.status_code == 200, before.text
        first.stop()
        down = ask(front.url)
        assert down.status_code == 503, down.text
        error = down.json()["error"]
        assert error["code"] == "engine_unavailable" and "\n" not in error["message"]
        second = start_vllm(vllm_python(), world.base, tmp_path / "second", env, port=port)
        after = ask(front.url)
        assert after.status_code == 200, after.text
        assert after.json()["choices"] == before.json()["choices"]
        assert after.json()["mint"]["set"] == before.json()["mint"]["set"]
        assert list((tmp_path / "second" / "adapters").iterdir())  # fetched again, by the plugin
    finally:
        front.stop()
        for server in (first, second):
            if server is not None:
                server.stop()
