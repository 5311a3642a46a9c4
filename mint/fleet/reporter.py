"""The thread a serving process reports from, beside the request path.

`Reporter(send, snapshot)` sends `snapshot()` (a report, see `mint.fleet.report`) through
`send(report)` at once when told that something changed (`changed()`: a switch, a failure, a
canary's split), and otherwise every `interval` seconds. Nothing waits for it: `changed()`
only sets a flag, and a report is built and sent on the reporter's own thread. A report that
cannot go (the registry down, slower than the send's deadline, or refusing it) is dropped and
counted. The next one, a whole snapshot again, follows a second later when the registry was
out of reach or failing (so a registry back, or a load balancer's other replica, hears the
state within that second), and an interval later when it refused the report.
`close(goodbye=True)` sends a last report saying the process stops, so that the registry does
not wait three intervals to call it stale.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("mint.fleet")

INTERVAL = 10.0  # seconds between reports when nothing changes
RETRY = 1.0  # seconds before the next report after one that could not go


def instance_name(host: str, port: int) -> str:
    """The default instance name: HOST:PORT, the machine's name for a wildcard host (0.0.0.0,
    ::), so that replicas on many machines listening everywhere are told apart (on Kubernetes
    it is the pod's name)."""
    shown = host.strip("[]")
    if shown in ("", "0.0.0.0", "::"):
        shown = socket.gethostname()
    return f"[{shown}]:{port}" if ":" in shown else f"{shown}:{port}"


def when(seconds: float | None) -> str | None:
    """A time.time() value as the ISO 8601 time a report carries."""
    if seconds is None:
        return None
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat()


def retryable(exc: BaseException) -> bool:
    """Whether a report that failed with EXC may go a moment later: the registry out of reach
    or failing (5xx), not a refusal of this report or token (4xx: the next interval)."""
    status = getattr(exc, "status", None)
    return isinstance(exc, ConnectionError) or (status is not None and status >= 500)


class Reporter:
    """Sends SNAPSHOT() through SEND at once on `changed()`, else every INTERVAL seconds."""

    def __init__(
        self,
        send: Callable[[dict], Any],
        snapshot: Callable[[], dict],
        *,
        interval: float = INTERVAL,
        retry: float = RETRY,
    ):
        self.send, self.snapshot = send, snapshot
        self.interval, self.retry = interval, min(retry, interval)
        self.sent = self.dropped = 0
        self._wake, self._stop = threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False
        self._retryable = True  # the last failure may pass a second later (not a refusal)

    def start(self) -> Reporter:
        self._thread = threading.Thread(target=self._loop, name="mint-fleet-report", daemon=True)
        self._thread.start()
        return self

    def changed(self) -> None:
        """Something changed: report it now (never blocks)."""
        self._wake.set()

    def stats(self) -> dict:
        return {"sent": self.sent, "dropped": self.dropped}

    def _loop(self) -> None:
        wait = 0.0
        while not self._stop.is_set():
            self._wake.wait(wait)
            self._wake.clear()
            if self._stop.is_set():
                return
            sent = self.report_once()
            wait = self.interval if sent or not self._retryable else self.retry

    def report_once(self, **extra: Any) -> bool:
        """Build and send one report now; False (counted as dropped) when it could not go."""
        try:
            report = self.snapshot() | {"dropped": self.dropped, **extra}
            self.send(report)
        except Exception as exc:  # noqa: BLE001 - a report that cannot go never stops serving
            self.dropped += 1
            self._retryable = retryable(exc)
            if not self._failing:
                log.warning("a fleet report could not go (dropped, counted): %s", exc)
            self._failing = True
            return False
        if self._failing:
            log.info("fleet reports go again (%d dropped so far)", self.dropped)
        self._failing = False
        self.sent += 1
        return True

    def close(self, *, goodbye: bool = True) -> None:
        """Stop reporting; with GOODBYE, send one last report saying the process stops."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(30.0)
            self._thread = None
        if goodbye:
            self.report_once(stopped=True)
