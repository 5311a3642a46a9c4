"""Production servers follow a registry: two real `mint --repo URL serve macaron@production`
processes (the installed CLI, a reader token in MINT_TOKEN) switch to the set a promote or a
rollback on the registry names, while clients keep sending chat requests to both, and no
request fails. Times are measured and printed, never asserted (bench/bench_follow.py reports
them)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from test_events import macaron  # noqa: F401  (the fixture: a set line behind a registry)

from mint import api

from support import free_port

pytestmark = pytest.mark.xdist_group("demo")

ME = "tester"
START_TIMEOUT = 240.0  # seconds: loading the base and a set on a busy two-core machine
SWITCH_TIMEOUT = 60.0  # seconds: generous; the target (1 s) is measured by the bench
BODY = {"model": "macaron", "messages": [{"role": "user", "content": "fix the bug"}]}


@dataclass
class Follower:
    """A `mint serve` process following REV on a registry."""

    url: str
    process: subprocess.Popen
    log: Path

    def health(self) -> dict | None:
        try:
            r = httpx.get(self.url + "/healthz", timeout=5)
        except httpx.HTTPError:
            return None
        return r.json() if r.status_code == 200 else None

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()


def start_follower(
    registry_url: str, token: str, rev: str, base_dir, folder: Path, env: dict | None = None
) -> Follower:
    """`mint --repo REGISTRY_URL serve REV --base-dir BASE_DIR --port P` (the installed
    console script), the token in MINT_TOKEN, ENV added; returns once /healthz answers."""
    mint = Path(sys.executable).parent / "mint"
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = folder / f"serve-{port}.log"
    argv = [str(mint), "--repo", registry_url, "serve", rev, "--base-dir", str(base_dir)]
    env = {**os.environ, **(env or {}), "MINT_TOKEN": token}
    env["XDG_CONFIG_HOME"] = str(folder / "config")
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [*argv, "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    follower = Follower(f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + START_TIMEOUT
    while follower.health() is None:
        if process.poll() is not None or time.monotonic() > deadline:
            follower.stop()
            raise RuntimeError(f"mint serve did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    return follower


@dataclass
class Load:
    """Clients sending chat requests to every server until stopped; each answer is kept as
    (server, time it came back, the set that answered), each failure with its reason."""

    urls: list[str]
    clients_per_server: int = 1
    answers: list[tuple[str, float, str]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Load:
        for url in self.urls:
            for _ in range(self.clients_per_server):
                thread = threading.Thread(target=self._send, args=(url,), daemon=True)
                thread.start()
                self._threads.append(thread)
        return self

    def _send(self, url: str) -> None:
        with httpx.Client(base_url=url, timeout=120) as client:
            while not self._stop.is_set():
                try:
                    r = client.post("/v1/chat/completions", json=BODY)
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


def switch(move, target: str, followers: list[Follower], load: Load) -> list[float]:
    """Make MOVE (a promote or rollback returning when done); wait until every follower
    reports TARGET and has answered a request from it. Returns the seconds from MOVE's return
    to each follower's first answer from TARGET."""
    move()
    moved = time.monotonic()
    deadline = moved + SWITCH_TIMEOUT
    for f in followers:
        while (f.health() or {}).get("commit") != target or load.first_answer(
            f.url, target, moved
        ) is None:
            assert time.monotonic() < deadline, f"{f.url} still serves {f.health()}"
            time.sleep(0.02)
    return [load.first_answer(f.url, target, moved) - moved for f in followers]


def test_two_serving_processes_follow_promote_and_rollback_under_load(macaron, tmp_path):  # noqa: F811
    repo, registry, token, sets, files = macaron
    api.promote(repo, sets[0], "production", by=ME)
    followers: list[Follower] = []
    load = None
    try:
        for n in range(2):
            followers.append(
                start_follower(
                    registry.url, token, "macaron@production", files.base, tmp_path / f"f{n}"
                )
            )
        assert [f.health()["commit"] for f in followers] == [sets[0], sets[0]]
        load = Load([f.url for f in followers]).start()
        promoted = switch(
            lambda: api.promote(repo, sets[1], "production", by=ME), sets[1], followers, load
        )
        rolled = switch(
            lambda: api.rollback(repo, "macaron@production", by=ME), sets[0], followers, load
        )
        load.stop()
        print(f"\nfirst answer from the new set: promote {promoted}, rollback {rolled} (s)")
        assert load.failures == []
        for f in followers:
            served = {s for u, _, s in load.answers if u == f.url}
            assert served == {sets[0], sets[1]}, f.url
            assert f.health()["commit"] == sets[0]
    finally:
        if load is not None:
            load.stop()
        for f in followers:
            f.stop()
