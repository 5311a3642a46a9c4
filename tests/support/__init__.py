"""Helpers shared by the test modules; the pytest fixtures themselves live in conftest.py.

Test modules import helpers from this package and fixtures through conftest.py, never from
one another (tests/test_layout.py checks it):

- `support.texts`: the contract and mol.toml texts that several modules commit.
- `support.pgdb`: a throwaway PostgreSQL database (the benchmarks use it too).
- `support.registry`: real `mint registry serve` processes, tokens, error answers.
- `support.forkserver`: the registries and `mint serve` processes above, forked from a
  parent that imported mint once (a start costs a fifth of the CPU); `MINT_TEST_FORK=0`
  starts each as a fresh `python -m mint`.
- `support.hubserver`: a Hugging Face Hub for tests (olah) and a stub Hub.
- `support.s3server`: one moto S3 server per test process.
- `support.loop`: the set line `macaron` on the tiny models, a contract whose evaluator
  scores routers, and traces with feedback.
- `support.runtime`: the trained demo MoL (once per process), set specs, the demo committed.
- `support.serving`: real `mint serve` processes, and clients that keep requests flowing.
- `support.concurrency`: many `mint` processes released at one moment.
- `support.wire`: commit wire forms whose id is computed again after a change.
- `support.browser`: Debian's Chromium driven by Selenium, for the pages and screenshots.
- `support.hooks`: a webhook receiver, and the signature check a receiver makes.
- `support.fleet`: what the fleet tests serve, and a TCP balancer over registry replicas.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable


def record_start(kind: str) -> None:
    """With MINT_TEST_CPU=FILE set, note in FILE.starts that the running test started a KIND
    process (a registry, a `mint serve`): `python -m support.cpu FILE` counts them per module."""
    path = os.environ.get("MINT_TEST_CPU")
    if path:
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
        with open(path + ".starts", "a") as out:
            out.write(f"{test}\t{kind}\n")


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on (now: take it at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition: Callable[[], object], what: str, timeout: float = 120.0) -> None:
    """Poll CONDITION every 20 ms until it is true; fail with WHAT after TIMEOUT seconds.

    TIMEOUT is a liveness limit on a busy machine, never a measure of speed."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)
