"""Following the names that move: a channel asked for directly (`chat@production`).

vLLM keeps a resolved adapter under the name the client asked for and never asks a resolver
again, so the plugin watches each moving name it resolved. On a registry it reads the event
stream (a move of the ref, or a reconnect, makes it check; it also checks every
`fallback` seconds); on a local repository it checks every `interval` seconds. When the name
names another commit, `on_move(asked, old, new)` is called once and the name is forgotten
until it is resolved again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("vllm.plugins.mint")  # under vLLM's own log handlers

FALLBACK = 30.0  # seconds between checks when the event stream is read

OnMove = Callable[[str, str, str], None]


class Follower:
    """Watches `LINE@REV` names through RESOLVE(line, rev) -> commit id."""

    def __init__(
        self,
        resolve: Callable[[str, str], str],
        on_move: OnMove,
        *,
        interval: float = 1.0,
        stream=None,
    ):
        """`stream`: a registry's `EventStream` (None: poll every `interval` seconds)."""
        self.resolve, self.on_move = resolve, on_move
        self.interval = interval if stream is None else FALLBACK
        self.stream = stream
        self._watched: dict[str, tuple[str, str, str]] = {}  # asked -> (line, rev, commit)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def watch(self, asked: str, line: str, rev: str, commit: str) -> None:
        """Follow ASKED, which names COMMIT now; starts the threads on first use."""
        with self._lock:
            self._watched[asked] = (line, rev, commit)
            if not self._threads:
                self._start()

    def watched(self) -> dict[str, str]:
        """Each followed name and the commit it named when resolved."""
        with self._lock:
            return {asked: commit for asked, (_, _, commit) in self._watched.items()}

    def _start(self) -> None:
        loop = threading.Thread(target=self._loop, name="mint-vllm-follow", daemon=True)
        self._threads.append(loop)
        if self.stream is not None:
            reader = threading.Thread(target=self._read, name="mint-vllm-events", daemon=True)
            self._threads.append(reader)
        for thread in self._threads:
            thread.start()

    def _read(self) -> None:
        def on_event(event: dict) -> None:
            data = event.get("data") or {}
            with self._lock:
                hit = any(
                    data.get("line") == line and data.get("name") in (rev, None)
                    for line, rev, _ in self._watched.values()
                )
            if hit:
                self._wake.set()

        self.stream.follow(on_event, on_connect=self._wake.set)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if not self._stop.is_set():
                self.check()

    def check(self) -> list[str]:
        """Check every followed name once; the names that moved (each reported once)."""
        with self._lock:
            watched = dict(self._watched)
        moved = []
        for asked, (line, rev, commit) in watched.items():
            try:
                now = self.resolve(line, rev)
            except Exception as exc:  # noqa: BLE001 - a failed check is retried at the next
                log.warning("checking %s: %s", asked, exc)
                continue
            if now == commit:
                continue
            with self._lock:
                if self._watched.get(asked, (None, None, None))[2] != commit:
                    continue  # resolved again meanwhile
                del self._watched[asked]
            log.info("%s moved from %s to %s", asked, commit[:12], now[:12])
            self.on_move(asked, commit, now)
            moved.append(asked)
        return moved

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self.stream is not None:
            self.stream.close()
