"""Running `mint serve`'s HTTP server until a process manager stops it.

uvicorn catches SIGINT and SIGTERM, stops taking connections and lets the requests in flight
finish; then it raises the signal again, and SIGTERM's default action kills the process before
the caller's `finally` (closing the runtime, which writes the traces still queued) can run:
19 of 264 answered turns were lost that way. `Server` keeps the drain and does not raise the
signal again, so SIGTERM and SIGINT both end in a clean return: requests finished (within
`drain` seconds), then the caller closes the runtime and exits 0. A second signal while
draining stops at once.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import uvicorn

from mint.runtime.auth import RequireToken
from mint.runtime.runtime import Runtime
from mint.runtime.server import create_app

DRAIN = 30.0  # seconds the requests in flight get to finish after a stop signal
SIGNALS = (signal.SIGINT, signal.SIGTERM)
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_to_stderr(level: int = logging.INFO) -> None:
    """mint's own log lines (`mint.runtime`: each swap, canary start and stop;
    `mint.remote.events`: each reconnect of a followed channel's event stream) on standard
    error, one a line with the time. Once per process, whoever calls it again."""
    logger = logging.getLogger("mint")
    if any(getattr(h, "mint_serve", False) for h in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.mint_serve = True
    logger.addHandler(handler)
    logger.setLevel(level)


class Server(uvicorn.Server):
    """uvicorn's server, whose stop signals end `run()` cleanly; `stopped_by` names the
    signal that stopped it (None when it stopped otherwise)."""

    stopped_by: str | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # signals reach only the main thread: whoever runs this one stops it
            return
        kept = {sig: signal.signal(sig, self.handle_exit) for sig in SIGNALS}
        try:
            yield
        finally:
            for sig, handler in kept.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.should_exit:  # a second signal: stop waiting for the requests in flight
            self.force_exit = True
        self.should_exit = True
        self.stopped_by = self.stopped_by or signal.Signals(sig).name


def serving_app(runtime: Runtime, checks: Sequence[Any] = ()):
    """The server's app; with CHECKS (see `mint.runtime.auth`) every endpoint but /healthz
    needs a token one of them accepts."""
    app = create_app(runtime)
    if checks:

        def served_versions() -> list[str]:
            # the canary's candidate answers some requests too: a caller must read both
            return [e.id for e in (runtime.active, runtime.canary) if e is not None]

        app.add_middleware(
            RequireToken,
            checks=list(checks),
            served_versions=served_versions,
            on_refused=runtime.metrics.error,
        )
    return app


def serve(
    runtime: Runtime,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    checks: Sequence[Any] = (),
    log_level: str = "info",
    drain: float = DRAIN,
) -> str | None:
    """Serve RUNTIME until SIGINT or SIGTERM (blocks); the requests in flight finish first.
    Returns the name of the signal that stopped it. The caller closes the runtime."""
    config = uvicorn.Config(
        serving_app(runtime, checks),
        host=host,
        port=port,
        log_level=log_level,
        lifespan="off",
        timeout_graceful_shutdown=drain,
    )
    server = Server(config)
    server.run()
    return server.stopped_by


def is_loopback(host: str) -> bool:
    """Whether HOST is reached only from this machine (`localhost`, 127.0.0.0/8, ::1)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
