"""Following a registry's event stream (`GET /api/v1/events`, server-sent events) over httpx.

`EventStream(url, token).follow(on_event)` calls `on_event(event)` with each event's
`{"id", "type", "at", "data"}` in order, and `on_connect()` each time the stream (re)opens.
When the stream drops or the registry cannot be reached it reconnects with `Last-Event-ID`,
waiting longer after each failure (0.1 s doubling up to 5 s), until `close()`; each reconnect
is one line in the log: what it follows, after how long, which attempt.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator

import httpx

from mint import __version__
from mint.remote.http import API, normalize

log = logging.getLogger("mint.remote.events")

# No read may wait much past the server's heartbeat (15 s) before the link counts as dropped.
TIMEOUT = httpx.Timeout(10.0, read=45.0)
FIRST_BACKOFF, MAX_BACKOFF = 0.1, 5.0


def parse(lines: Iterable[str]) -> Iterator[tuple[str | None, str, str]]:
    """(id, event, data) of each server-sent event in LINES (comments skipped)."""
    event_id, kind, data = None, "message", []
    for line in lines:
        if not line:
            if data or event_id is not None:
                yield event_id, kind, "\n".join(data)
            event_id, kind, data = None, "message", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "id":
            event_id = value
        elif field == "event":
            kind = value
        elif field == "data":
            data.append(value)


class EventStream:
    """The event stream of the registry at URL, read with TOKEN; resumes after LAST_ID
    (None: from the first event, or with TAIL from the newest)."""

    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        last_id: int | None = None,
        tail: bool = False,
        label: str | None = None,
    ):
        self.url = normalize(url) + API + "/events"
        self.label = f"{label} on {normalize(url)}" if label else normalize(url)  # for the log
        self.headers = {"User-Agent": f"mint/{__version__}", "Accept": "text/event-stream"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.last_id = last_id
        self.tail = tail  # with no LAST_ID: start at the newest event, not the first
        self.connects = 0  # streams opened so far
        self._down_since: float | None = None  # when the last stream dropped (monotonic)
        self._attempts = 0  # connections tried since then
        self._closed = threading.Event()
        self._response: httpx.Response | None = None

    def follow(
        self, on_event: Callable[[dict], None], on_connect: Callable[[], None] | None = None
    ) -> None:
        """Read events until `close()`, reconnecting with backoff."""
        backoff = FIRST_BACKOFF
        with httpx.Client(timeout=TIMEOUT) as http:
            while not self._closed.is_set():
                if self._down_since is not None:
                    self._attempts += 1
                try:
                    if self._read(http, on_event, on_connect):
                        backoff = FIRST_BACKOFF
                except Exception as exc:  # noqa: BLE001 - any failure: wait, then reconnect
                    if self._closed.is_set():
                        return
                    log.warning("event stream: %s; reconnecting in %.1f s", exc, backoff)
                if self._down_since is None:
                    self._down_since = time.monotonic()
                self._closed.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    def _read(self, http: httpx.Client, on_event, on_connect) -> bool:
        """One connection: True when it opened (then ended or broke off)."""
        headers = dict(self.headers)
        if self.last_id is not None:
            headers["Last-Event-ID"] = str(self.last_id)
        params = {"tail": "true"} if self.tail and self.last_id is None else {}
        with http.stream("GET", self.url, headers=headers, params=params) as response:
            if response.status_code != 200:
                response.read()
                raise RuntimeError(f"{response.status_code} {response.text[:200]}")
            self._response = response
            self.connects += 1
            self._log_reconnect()
            if on_connect:
                on_connect()
            for event_id, _, data in parse(response.iter_lines()):
                if self._closed.is_set():
                    break
                if data:
                    on_event(json.loads(data))
                if event_id and event_id.isdigit():
                    self.last_id = int(event_id)
        return True

    def _log_reconnect(self) -> None:
        if self._down_since is None:
            return
        down = time.monotonic() - self._down_since
        log.info(
            "following %s: reconnected after %.1f s (attempt %d)", self.label, down, self._attempts
        )
        self._down_since, self._attempts = None, 0

    def close(self) -> None:
        """Stop following; a read in progress is broken off."""
        self._closed.set()
        response = self._response
        if response is not None:
            try:
                response.close()
            except Exception:  # noqa: BLE001 - closing from another thread may race the reader
                pass
