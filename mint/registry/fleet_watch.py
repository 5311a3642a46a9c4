"""The registry's look at its fleets, every second while it serves: a channel whose live
instances stay off its holder for longer than `--fleet-diverged-after` seconds gets a
`fleet.diverged` event, and one that converges again a `fleet.converged` event
(`mint.fleet.signals`; replicas write each once). Webhooks send them, HMAC-signed."""

from __future__ import annotations

import contextlib
import logging
import threading

from mint.fleet.signals import fleet_signals
from mint.repo import Repo

log = logging.getLogger("mint.registry")

POLL = 1.0  # seconds between looks


class FleetWatch:
    """A thread that calls `fleet_signals` every POLL seconds until stopped."""

    def __init__(self, repo: Repo, after: float, poll: float = POLL):
        self.repo, self.after, self.poll = repo, after, poll
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mint-fleet-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        failures = 0
        while not self._stop.wait(min(self.poll * 2**failures, 30.0)):
            try:
                fleet_signals(self.repo, self.after)
                failures = 0
            except Exception:  # noqa: BLE001 - a database hiccup: log, look again later
                failures += 1
                log.exception("looking at the fleets failed (%d in a row)", failures)


def install(app) -> None:
    """Run a FleetWatch over the app's repository while the app runs (its lifespan)."""
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(application):
        from starlette.concurrency import run_in_threadpool

        watch = FleetWatch(application.state.repo, application.state.diverged_after)
        watch.start()
        try:
            async with inner(application) as state:
                yield state
        finally:
            await run_in_threadpool(watch.stop)

    app.router.lifespan_context = lifespan
