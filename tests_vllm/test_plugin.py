"""mint's vLLM plugin in a real vLLM server: names to commits, what it refuses, channels it
follows.

A request for `model="LINE@REV"` answers under the name `LINE@<full commit id>`, whatever
revision form REV is; an adapter version whose cached bytes were damaged is never served from
them; an adapter trained for another base, and a token that may not read a line, get nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest
from harness import Reference, complete, error_message, served_name, vllm_python

from mint import api
from mint.runtime import prompts
from mint.store.base import sha256_file

from support import wait_until

FOLLOW_TIMEOUT = 30.0  # seconds a moved channel gets to reach the next request (liveness only)


def test_a_tag_a_channel_and_a_commit_prefix_answer_as_the_full_commit(world, vllm):
    chat = world.commits["chat"]
    for rev in ("v1", "production", chat[:12]):
        assert served_name(complete(vllm.url, f"chat@{rev}")) == f"chat@{chat}", rev
    # another line's tag names that line's commit
    agent = world.commits["agent"]
    assert served_name(complete(vllm.url, "agent@v1")) == f"agent@{agent}"


def test_an_adapter_for_another_base_is_refused_naming_the_base(world, vllm):
    commit = world.commits["otherbase"]
    response = complete(vllm.url, f"otherbase@{commit[:12]}")
    assert 400 <= response.status_code < 500, response.text
    message = error_message(response)
    assert "other-llama" in message and "base" in message, message
    assert not (vllm.cache / commit).exists()


def test_a_corrupt_cached_adapter_is_never_served(world, vllm, tmp_path):
    """The cached weights of a version vLLM has let go of are damaged in place; asked for
    again, it is checked out anew (the same answer as before) or refused, never loaded from
    the damaged bytes, which would answer otherwise."""
    commit, name = world.commits["spare"], f"spare@{world.commits['spare']}"
    reference = Reference(world.base, world.files.experts["coding"])
    prompt = prompts.encode_prompt(reference.tokenizer, "", PROMPT_BODY, 200)
    first = complete(vllm.url, name, prompt, max_tokens=8, return_token_ids=True)
    assert served_name(first) == name
    right = first.json()["choices"][0]["token_ids"]
    weights = vllm.cache / commit / "adapter_model.safetensors"
    assert weights.is_file(), sorted(os.listdir(vllm.cache))

    whole = sha256_file(weights)
    unloaded = _post(vllm.url + "/v1/unload_lora_adapter", {"lora_name": name})
    assert unloaded.status_code == 200, unloaded.text
    damaged = damage(weights, tmp_path)
    # the damaged weights would answer otherwise: serving them could not go unnoticed
    wrong = Reference(world.base, damaged).greedy(prompt, 8)
    assert wrong != reference.greedy(prompt, 8)

    again = complete(vllm.url, name, prompt, max_tokens=8, return_token_ids=True)
    if again.status_code == 200:
        assert again.json()["model"] == name
        assert again.json()["choices"][0]["token_ids"] == right
        assert sha256_file(weights) == whole  # checked out anew
    else:
        assert 400 <= again.status_code < 500, again.text


def test_a_channel_asked_for_by_name_follows_its_moves(world, vllm):
    """`chat@production` moves to another commit and back: the next requests for it answer
    from the commit it names, with no request failing in between."""
    old, new = world.commits["chat"], world.commits["chat2"]
    assert served_name(complete(vllm.url, "chat@production")) == f"chat@{old}"
    remote = world.remote()
    api.promote(remote, new, "production", by="ann")
    try:
        wait_until(
            lambda: _follows(vllm.url, "chat@production", old, new),
            f"chat@production still answers as {old[:12]} after its move to {new[:12]}",
            FOLLOW_TIMEOUT,
        )
    finally:
        api.rollback(remote, "chat@production", by="ann")
    wait_until(
        lambda: _follows(vllm.url, "chat@production", new, old),
        f"chat@production still answers as {new[:12]} after its rollback",
        FOLLOW_TIMEOUT,
    )


def _follows(url: str, asked: str, old: str, new: str) -> bool:
    """Whether ASKED now answers as NEW (it must answer, as OLD or NEW)."""
    line = asked.split("@")[0]
    got = served_name(complete(url, asked, max_tokens=1))
    assert got in (f"{line}@{old}", f"{line}@{new}"), got
    if got == f"{line}@{new}":
        return True
    time.sleep(0.25)
    return False


RESOLVE = """
import asyncio, json, os, sys
from mint.vllm.resolver import MintResolver

base, name = sys.argv[1], sys.argv[2]
resolver = MintResolver.from_env()
try:
    got = asyncio.run(resolver.resolve_lora(base, name))
    out = {"name": None if got is None else got.lora_name,
           "path": None if got is None else got.lora_path}
except Exception as exc:
    out = {"error": type(exc).__name__, "message": str(exc),
           "status": int(getattr(exc, "http_status", 0) or 0)}
finally:
    resolver.close()
print("RESULT " + json.dumps(out))
"""


def resolve_in_vllm_env(world, token: str, folder, name: str) -> dict:
    """`MintResolver.from_env().resolve_lora(BASE, NAME)` in vLLM's environment, with TOKEN
    and caches under FOLDER (MINT_VLLM_CACHE=FOLDER/adapters, XDG_CACHE_HOME=FOLDER/xdg)."""
    env = {
        **os.environ,
        "MINT_REPO": world.registry.url,
        "MINT_TOKEN": token,
        "MINT_VLLM_CACHE": str(folder / "adapters"),
        "XDG_CACHE_HOME": str(folder / "xdg"),
        "XDG_CONFIG_HOME": str(folder / "config"),
        "VLLM_NO_USAGE_STATS": "1",
    }
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [str(vllm_python()), "-c", RESOLVE, str(world.base), name],
        capture_output=True,
        text=True,
        env=env,
        cwd=folder,  # not the checkout, whose source folder `mint` would hide the installed one
        timeout=300,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


def files_under(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_a_token_that_may_not_read_the_line_gets_nothing(world, tmp_path):
    """The resolver in vLLM's environment: the admin's token gets the version, a reader of
    `other*` lines gets a refusal, and nothing is written to its caches."""
    allowed, refused = tmp_path / "admin", tmp_path / "outsider"
    got = resolve_in_vllm_env(world, world.tokens["admin"], allowed, "chat@production")
    assert got.get("name") == f"chat@{world.commits['chat']}", got
    assert (allowed / "adapters" / world.commits["chat"]).is_dir()

    got = resolve_in_vllm_env(world, world.tokens["outsider"], refused, "chat@production")
    assert got.get("name") is None, got
    if "error" in got:
        assert got["status"] in (401, 403, 404), got
    for cache in (refused / "adapters", refused / "xdg" / "mint"):  # the plugin's, mint's blobs
        assert not cache.exists() or files_under(cache) == [], files_under(cache)


PROMPT_BODY = "user: fix the python bug in my code please\nassistant:"


def damage(weights, folder):
    """Rewrite WEIGHTS in place (same size, as a bad disk would leave it) with every lora_B
    tensor replaced by large values; returns a folder holding the damaged adapter for PEFT."""
    import torch
    from safetensors.torch import load_file, save

    tensors = load_file(weights)
    generator = torch.Generator().manual_seed(0)
    for key, value in tensors.items():
        if "lora_B" in key:
            tensors[key] = torch.randn(value.shape, generator=generator, dtype=value.dtype)
    data = save(tensors, metadata={"format": "pt"})
    assert len(data) == weights.stat().st_size
    os.chmod(weights, 0o644)
    with open(weights, "r+b") as handle:
        handle.write(data)
    copy = folder / "damaged"
    copy.mkdir()
    shutil.copy(weights.parent / "adapter_config.json", copy)
    (copy / "adapter_model.safetensors").write_bytes(data)
    return copy


def _post(url: str, body: dict):
    import httpx

    return httpx.post(url, json=body, timeout=60)


@pytest.fixture(autouse=True)
def _server_alive(request):
    """A test that failed because the vLLM server died says so, with its log."""
    yield
    if "vllm" in request.fixturenames:
        server = request.getfixturevalue("vllm")
        assert server.process.poll() is None, f"the vLLM server exited:\n{server.output()}"
