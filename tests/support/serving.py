"""Real `mint serve` processes for tests: started on a free port, ready once /healthz answers,
stopped by their pid; and clients that keep chat requests flowing while a test moves a channel.

`start_serve` runs `python -m mint --repo REPO serve REV` (a local repository or a registry's
URL); `start_follower` runs the installed `mint` console script against a registry with a
reader token in MINT_TOKEN, as a production server would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from support import forkserver, free_port, record_start

START_TIMEOUT = 240.0  # seconds: loading the base and a set on a busy two-core machine
BODY = {"model": "macaron", "messages": [{"role": "user", "content": "fix the bug"}]}


@dataclass
class Served:
    """A `mint serve` process; its stdout and stderr go to `log`."""

    url: str
    process: subprocess.Popen | forkserver.Forked
    log: Path

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=120)

    def health(self) -> dict | None:
        try:
            r = httpx.get(self.url + "/healthz", timeout=5)
        except httpx.HTTPError:
            return None
        return r.json() if r.status_code == 200 else None

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 120) -> int:
        """Send SIG by pid and wait for the exit code (SIGKILL past TIMEOUT: a failure)."""
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        return self.process.returncode


def _start(argv: list[str], folder: Path, env: dict, port: int | None = None) -> Served:
    """ARGV (`python -m mint ...` or the `mint` script) plus `--port P` (PORT, else a free
    one) in a process whose config and cache live in FOLDER: forked warm
    (support.forkserver) unless MINT_TEST_FORK=0."""
    record_start("serve")
    folder.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log = folder / f"serve-{port}-{time.monotonic_ns()}.log"
    full_env = {**os.environ, "XDG_CONFIG_HOME": str(folder / "config"), **env}
    full_env["XDG_CACHE_HOME"] = str(folder / "cache")
    argv = [*argv, "--port", str(port)]
    if argv[1:3] == ["-m", "mint"]:
        process = forkserver.spawn(argv[3:], warm="serve", env=full_env, log=log)
    elif forkserver.enabled():  # the `mint` script: its entry point, forked warm
        process = forkserver.start_mint(argv[1:], warm="serve", env=full_env, log=log)
    else:
        with open(log, "wb") as out:
            process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=full_env)
    served = Served(f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + START_TIMEOUT
    with httpx.Client(timeout=5) as probe:  # one client: a new one per poll costs CPU
        while not _healthy(probe, served):
            if process.poll() is not None or time.monotonic() > deadline:
                served.stop(signal.SIGKILL)
                raise RuntimeError(f"mint serve did not start:\n{served.output()[-3000:]}")
            time.sleep(0.1)
    return served


def _healthy(probe: httpx.Client, served: Served) -> bool:
    try:
        return probe.get(served.url + "/healthz").status_code == 200
    except httpx.HTTPError:
        return False


def start_serve(repo: str, base, folder: Path, *args: str, env: dict | None = None) -> Served:
    """`python -m mint --repo REPO serve macaron@production --base-dir BASE ARGS --port P`;
    returns once /healthz answers (it needs no token)."""
    argv = [sys.executable, "-m", "mint", "--repo", repo, "serve", "macaron@production"]
    return _start([*argv, "--base-dir", str(base), *args], folder, env or {})


def start_follower(
    registry_url: str,
    token: str,
    rev: str,
    base_dir,
    folder: Path,
    env: dict | None = None,
    args: tuple[str, ...] = (),
    port: int | None = None,
) -> Served:
    """`mint --repo REGISTRY_URL serve REV --base-dir BASE_DIR ARGS --port P` (the installed
    console script), the token in MINT_TOKEN, ENV added, on PORT (default: a free one);
    returns once /healthz answers."""
    mint = Path(sys.executable).parent / "mint"
    argv = [str(mint), "--repo", registry_url, "serve", rev, "--base-dir", str(base_dir), *args]
    return _start(argv, folder, {**(env or {}), "MINT_TOKEN": token}, port)


def raw_chat(client: httpx.Client, text: str, **extra) -> httpx.Response:
    """A chat request whose JSON escapes every non-ASCII character, lone surrogates too."""
    body = {"model": "macaron", "messages": [{"role": "user", "content": text}], **extra}
    body.setdefault("max_tokens", 2)
    data = json.dumps(body, ensure_ascii=True).encode("ascii")
    return client.post(
        "/v1/chat/completions", content=data, headers={"content-type": "application/json"}
    )


@dataclass
class Load:
    """Clients sending chat requests to every server until stopped (client i of a server sends
    BODIES[i % len(BODIES)], BODY by default); each answer is kept as (server, time it came
    back, the set that answered), each failure with its reason."""

    urls: list[str]
    clients_per_server: int = 1
    bodies: list[dict] = field(default_factory=lambda: [BODY])
    answers: list[tuple[str, float, str]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Load:
        for url in self.urls:
            for i in range(self.clients_per_server):
                body = self.bodies[i % len(self.bodies)]
                thread = threading.Thread(target=self._send, args=(url, body), daemon=True)
                thread.start()
                self._threads.append(thread)
        return self

    def _send(self, url: str, body: dict) -> None:
        with httpx.Client(base_url=url, timeout=120) as client:
            while not self._stop.is_set():
                try:
                    r = client.post("/v1/chat/completions", json=body)
                except httpx.HTTPError as exc:
                    self.failures.append(f"{url}: {type(exc).__name__}: {exc}")
                    continue
                if r.status_code != 200:
                    self.failures.append(f"{url}: {r.status_code} {r.text[:200]}")
                    continue
                self.answers.append((url, time.monotonic(), r.json()["mint"]["set"]))

    def first_answer(self, url: str, set_id: str, after: float) -> float | None:
        """When URL first answered from SET_ID after AFTER (monotonic seconds), or None."""
        times = [t for u, t, s in list(self.answers) if u == url and s == set_id and t > after]
        return min(times) if times else None

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(180)
