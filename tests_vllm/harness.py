"""Helpers of the vLLM tests: a real vLLM server with mint's plugin, requests to it, and the
PEFT model that says where two greedy answers part.

The vLLM server runs in vLLM's own virtual environment (MINT_VLLM_PYTHON, which `make
test-vllm` sets), in a process group of its own, and is stopped by that group's id. Everything
else (pytest, the registry, `mint serve`, the PEFT checks) runs in this environment.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx

from support.serving import Served, _start

DEFAULT_PYTHON = Path.home() / ".cache" / "mint" / "vllm-venv" / "bin" / "python"
START_TIMEOUT = 300.0  # seconds: a liveness limit for a cold start on a busy two-core machine
PROMPT = "user: please fix the python bug\nassistant:"  # a text prompt for plain completions


def vllm_python() -> Path:
    """The Python of vLLM's environment: MINT_VLLM_PYTHON, else the one `make test-vllm`
    installs."""
    return Path(os.environ.get("MINT_VLLM_PYTHON") or DEFAULT_PYTHON)


@dataclass
class VllmServer:
    """A `vllm.entrypoints.openai.api_server` process and where its adapters are cached."""

    url: str
    process: subprocess.Popen
    log: Path
    cache: Path  # MINT_VLLM_CACHE: one folder per commit id

    def output(self, tail: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-tail:] if self.log.exists() else ""

    def healthy(self) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(self.url + "/health", timeout=5).status_code == 200
        return False

    def stop(self) -> None:
        """Its process group stopped, as mint stops a server it started."""
        from mint.runtime import vllm_server

        vllm_server.VllmServer(self.process, self.url, self.log).stop()


def start_vllm(
    python: Path, base_dir: Path, folder: Path, env: dict[str, str], port: int | None = None
) -> VllmServer:
    """vLLM serving BASE_DIR as `base` with LoRA on, float32, on a free port, started by
    mint's own launcher (`mint.runtime.vllm_server.launch`, in FOLDER, outside the checkout);
    ENV (MINT_REPO, MINT_TOKEN...) is added to this process's. Returns once GET /health
    answers 200; raises with the server's log when it exits or does not answer in time."""
    from mint.runtime.vllm_server import EngineFailed, launch

    folder.mkdir(parents=True, exist_ok=True)
    cache = folder / "adapters"
    full_env = {
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "0-1"),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
        # mint's blob cache for the registry goes under XDG_CACHE_HOME: the test's own folder,
        # while vLLM keeps its compile cache where it always is
        "VLLM_CACHE_ROOT": os.environ.get("VLLM_CACHE_ROOT", str(Path.home() / ".cache" / "vllm")),
        "XDG_CACHE_HOME": str(folder / "xdg-cache"),
        "MINT_VLLM_CACHE": str(cache),
        **env,
    }
    args = ("--dtype", "float32", "--max-model-len", "256")
    try:
        server = launch(
            base_dir,
            env=full_env,
            args=args,
            python=python,
            folder=folder,
            timeout=START_TIMEOUT,
            port=port,
        )
    except EngineFailed:
        logs = "".join(p.read_text(errors="replace")[-4000:] for p in folder.glob("vllm-*.log"))
        raise RuntimeError(f"the vLLM server did not start:\n{logs}") from None
    return VllmServer(server.url, server.process, server.log, cache)


def start_front(world, folder: Path, *args: str, rev: str = "macaron@production") -> Served:
    """`mint --repo REGISTRY serve REV --base-dir BASE ARGS` for WORLD (see conftest), the
    installed console script with the admin's token in MINT_TOKEN; returns once /healthz
    answers."""
    mint = Path(sys.executable).parent / "mint"
    argv = [str(mint), "--repo", world.registry.url, "serve", rev]
    argv += ["--base-dir", str(world.base), *args]
    return _start(argv, folder, {"MINT_TOKEN": world.tokens["admin"]})


def complete(url: str, model: str, prompt: str | list[int] = PROMPT, **extra) -> httpx.Response:
    """POST /v1/completions to vLLM: greedy, 4 tokens unless EXTRA says otherwise."""
    body = {"model": model, "prompt": prompt, "max_tokens": 4, "temperature": 0, **extra}
    return httpx.post(url + "/v1/completions", json=body, timeout=120)


def served_name(response: httpx.Response) -> str:
    """The `model` of a 200 answer (the name vLLM loaded); fails on anything else."""
    assert response.status_code == 200, response.text
    return response.json()["model"]


def error_message(response: httpx.Response) -> str:
    """The message of an OpenAI-style error answer."""
    try:
        body = response.json()
    except ValueError:
        return response.text
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("message"))
    return str(body.get("message") or body.get("detail") or body) if isinstance(body, dict) else ""


def chat(url: str, model: str, text: str, **extra) -> httpx.Response:
    """POST /v1/chat/completions to a `mint serve` front end."""
    body = {"model": model, "messages": [{"role": "user", "content": text}], **extra}
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=180)


# --- the PEFT model, as the embedded runtime runs it ------------------------------------------


class Reference:
    """The base with one LoRA adapter in float32 through PEFT, on this process's CPU: greedy
    tokens and the gap between the two best logits at a step."""

    def __init__(self, base_dir: Path, adapter_dir: Path):
        import torch
        from peft import PeftModel

        from mint.examples.tiny import load_base

        base, self.tokenizer = load_base(base_dir)
        self.model = PeftModel.from_pretrained(base, str(adapter_dir)).eval()
        self.torch = torch

    def logits(self, ids: list[int]):
        """The next-token logits after IDS."""
        with self.torch.inference_mode():
            out = self.model(input_ids=self.torch.tensor([ids]))
        return out.logits[0, -1].float()

    def greedy(self, prompt: list[int], max_new: int) -> list[int]:
        """Greedy tokens after PROMPT, up to and including the end token."""
        new: list[int] = []
        for _ in range(max_new):
            token = int(self.logits(prompt + new).argmax())
            new.append(token)
            if token == self.tokenizer.eos_token_id:
                break
        return new

    def top2(self, ids: list[int]) -> tuple[int, int, float]:
        """(best token, second token, their logit gap) after IDS."""
        values, tokens = self.logits(ids).topk(2)
        return int(tokens[0]), int(tokens[1]), float(values[0] - values[1])
