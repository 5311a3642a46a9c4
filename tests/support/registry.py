"""Real registry servers for tests: `mint registry serve` processes on free ports.

`start_registry(repo_root)` starts one over an existing repository (SQLite or PostgreSQL, as
its config says), waits until `/openapi.json` answers, and returns a `Registry` whose `stop()`
ends it by its pid. Two calls over one PostgreSQL repository are two replicas.
`create_token(repo_root, name, role)` makes a token through the real CLI and returns it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from support import forkserver, free_port, record_start

START_TIMEOUT = 90.0  # the machine is shared: a cold start can take a while


@dataclass
class Registry:
    url: str  # http://127.0.0.1:PORT, no trailing slash
    pid: int
    log: Path  # the server's stdout and stderr
    _process: subprocess.Popen | forkserver.Forked = field(repr=False)

    def client(self, token: str | None = None, **kwargs) -> httpx.Client:
        """An httpx client on this server, with TOKEN as its bearer token."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60, **kwargs)

    def alive(self) -> bool:
        return self._process.poll() is None

    def returncode(self) -> int | None:
        """The exit code (minus the signal's number when a signal ended it); None if alive."""
        return self._process.poll()

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM by pid (uvicorn finishes requests in flight), then SIGKILL if needed."""
        if self._process.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self._process.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def start_registry(
    repo_root: str | os.PathLike, *, env: dict | None = None, args: tuple[str, ...] = ()
) -> Registry:
    """Start `mint --repo REPO_ROOT registry serve` on a free port of 127.0.0.1 (ARGS are
    extra serve options, e.g. ("--max-body", "65536")); ENV is added to this process's."""
    record_start("registry")
    for _ in range(3):  # a free port can be taken between asking and binding: try another
        port = free_port()
        log = Path(repo_root) / f".registry-{port}.log"
        argv = ["--repo", str(repo_root), "registry", "serve", "--host", "127.0.0.1"]
        argv += ["--port", str(port), *args]
        env = {**os.environ, **(env or {})}
        process = forkserver.spawn(argv, warm="registry", env=env, log=log)
        registry = Registry(f"http://127.0.0.1:{port}", process.pid, log, process)
        if _wait_until_up(registry):
            return registry
        registry.stop()
        if "address already in use" not in registry.output().lower():
            break
    raise RuntimeError(f"mint registry serve did not start:\n{registry.output()[-3000:]}")


def _wait_until_up(registry: Registry) -> bool:
    """Poll /healthz (it touches neither database nor store) every 50 ms with one client: a
    new httpx client per poll costs more CPU than the server's start."""
    deadline = time.monotonic() + START_TIMEOUT
    with httpx.Client(timeout=2) as probe:
        while time.monotonic() < deadline:
            if not registry.alive():
                return False
            with contextlib.suppress(httpx.HTTPError):
                if probe.get(f"{registry.url}/healthz").status_code == 200:
                    return True
            time.sleep(0.05)
    return False


def restart_registry(repo_root, port: int) -> Registry:
    """`mint registry serve` again on PORT, the one a stopped registry had (a client knows
    it by its URL)."""
    record_start("registry")
    deadline = time.monotonic() + 30
    while True:  # the old socket may linger a moment
        log = Path(repo_root) / f".registry-{port}-again.log"
        argv = ["--repo", str(repo_root), "registry", "serve", "--host", "127.0.0.1"]
        argv = [*argv, "--port", str(port)]
        process = forkserver.spawn(
            argv, warm="registry", env=dict(os.environ), log=log, append=True
        )
        registry = Registry(f"http://127.0.0.1:{port}", process.pid, log, process)
        if _wait_until_up(registry):
            return registry
        registry.stop()
        assert time.monotonic() < deadline, registry.output()[-2000:]
        time.sleep(0.2)


@contextlib.contextmanager
def running_registry(repo_root, **kwargs) -> Iterator[Registry]:
    """`start_registry` as a context: the server stops when the block ends."""
    registry = start_registry(repo_root, **kwargs)
    try:
        yield registry
    finally:
        registry.stop()


def create_token(
    repo_root: str | os.PathLike,
    name: str,
    role: str,
    lines: tuple[str, ...] = (),
    *,
    subprocess_cli: bool = False,
) -> str:
    """Make a token with `mint registry token create NAME --role ROLE [--lines GLOB]... --json`
    on the repository, and return its secret. The CLI runs in this process unless
    SUBPROCESS_CLI (then as `python -m mint`, as a shell would)."""
    argv = ["--repo", str(repo_root), "registry", "token", "create", name, "--role", role]
    argv += [a for glob in lines for a in ("--lines", glob)] + ["--json"]
    if subprocess_cli:
        done = subprocess.run(
            [sys.executable, "-m", "mint", *argv], capture_output=True, text=True
        )
        code, out, err = done.returncode, done.stdout, done.stderr
    else:
        from mint.cli import run_in_process

        code, out, err = run_in_process(argv)
    if code != 0:
        raise RuntimeError(f"token create {name} failed ({code}): {err.strip()}")
    return json.loads(out)["token"]


def error_of(response: httpx.Response, status: int, kind: str | None = None) -> dict:
    """Assert an error answer of STATUS (and error type KIND); return its error object."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"] and "\n" not in error["message"]
    if kind:
        assert error["type"] == kind, error
    return error
