"""Recording served turns as traces, off the request path.

`TraceRecorder.record(row)` only appends to a bounded queue; a background thread writes the
queue in batches (every `interval` seconds, or as soon as `batch` rows wait) through the
`write(rows)` it was given (`mint.api.write_traces` on the repository). A slow or failing
database therefore never fails or slows a request: a failed batch is counted and dropped
(logged once, with the first error), and rows past `max_pending` are dropped and counted.
A write may instead raise `TracesDeferred` (a registry out of reach: the batch waits for the
next try, an interval later, within `max_pending`) or `TracesRefused` (the registry refuses
the token: one warning, and every row from then on is dropped, with no more tries).
`flush()` writes what waits now; feedback calls it first, since a client may send feedback on
a turn whose trace is still queued. `close()` flushes and stops the thread.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from mint.errors import (
    DatabaseUnavailable,
    Forbidden,
    RegistryError,
    RegistryUnreachable,
    SchemaOutdated,
    Unauthenticated,
)
from mint.ids import utcnow
from mint.runtime.pipeline import TurnResult

log = logging.getLogger("mint.runtime")

MAX_USER = 200  # characters of a request's `user` kept (the column's width)


class TracesDeferred(Exception):
    """Traces could not be written now (the registry is out of reach); try again later."""


class TracesRefused(Exception):
    """Traces will never be written with these credentials (the registry refuses the token)."""


def through_registry(call: Callable) -> Callable:
    """CALL (a write to a registry) with the registry's refusals as a recorder's: a refused
    token (401, 403) is TracesRefused; a registry out of reach or failing is TracesDeferred."""

    def wrapped(*args, **kwargs):
        try:
            return call(*args, **kwargs)
        except (Unauthenticated, Forbidden) as exc:
            raise TracesRefused(f"the registry refuses this server's token: {exc}") from None
        except (RegistryUnreachable, DatabaseUnavailable, SchemaOutdated) as exc:
            raise TracesDeferred(str(exc)) from None
        except RegistryError as exc:
            if (exc.status or 0) >= 500:
                raise TracesDeferred(str(exc)) from None
            raise

    return wrapped


def trace_row(
    trace_id: str,
    result: TurnResult,
    *,
    variant: str,
    messages: Sequence[dict],
    user: str | None,
    content: bool = True,
) -> dict:
    """The `traces` row of one served turn; MESSAGES and the answer only when CONTENT."""
    return {
        "id": trace_id,
        "at": utcnow(),
        "set_line": result.set_name,
        "set_commit": result.set_id,
        "variant": variant,
        "label": result.route,
        "probs": dict(result.probs) or None,
        "expert_commit": result.expert_commit,
        "user": user[:MAX_USER] if user else None,
        "messages": list(messages) if content else None,
        "response": result.answer if content else None,
        "latency": {k: round(v, 6) for k, v in result.latency.items()},
    }


class TraceRecorder:
    """A bounded queue of trace rows and the thread that writes them in batches."""

    def __init__(
        self,
        write: Callable[[list[dict]], Any],
        *,
        feedback: Callable[..., Any] | None = None,
        content: bool = True,
        interval: float = 0.5,
        batch: int = 256,
        max_pending: int = 10_000,
    ):
        """`write(rows)` stores a batch; `feedback(trace_id, score, label, by=...)` records
        feedback (None: feedback is refused); `content=False` keeps no messages or answers."""
        self._write, self._feedback = write, feedback
        self.content, self.interval, self.batch = content, interval, batch
        self.max_pending = max_pending
        self.written = self.dropped = self.failed = 0
        self._pending: deque[dict] = deque()
        self._cond = threading.Condition()
        self._write_lock = threading.Lock()  # one batch written at a time, in order
        self._closed = False
        self._warned = False
        self._deferred = False  # the last write was deferred: wait an interval before the next
        self.refused: TracesRefused | None = None
        self._thread: threading.Thread | None = None

    @property
    def accepts_feedback(self) -> bool:
        return self._feedback is not None

    def record(self, row: dict) -> bool:
        """Queue ROW; False (and counted) when the queue is full or the recorder closed."""
        with self._cond:
            if self._closed or self.refused or len(self._pending) >= self.max_pending:
                self.dropped += 1
                return False
            self._pending.append(row)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="mint-traces", daemon=True)
                self._thread.start()
            if len(self._pending) >= self.batch:
                self._cond.notify()
        return True

    def pending(self) -> int:
        with self._cond:
            return len(self._pending)

    def flush(self) -> int:
        """Write every queued row now; returns how many were written."""
        with self._write_lock:
            with self._cond:
                rows = list(self._pending)
                self._pending.clear()
            if not rows:
                return 0
            try:
                self._write(rows)
            except TracesRefused as exc:
                self._refuse(exc, len(rows))
                return 0
            except TracesDeferred as exc:
                self._keep(rows)
                self._warn(exc)
                return 0
            except Exception as exc:  # noqa: BLE001 - a database failure must not reach a request
                self.failed += len(rows)
                self._warn(exc)
                return 0
            self._deferred = False
            self.written += len(rows)
            return len(rows)

    def feedback(self, trace_id: str, score: Any, label: Any = None, *, by: str | None = None):
        """Record feedback on a trace, after writing the traces still queued."""
        if self._feedback is None:
            raise RuntimeError("this recorder takes no feedback")
        self.flush()
        if self.refused is not None:
            raise TracesRefused(str(self.refused))
        try:
            return self._feedback(trace_id, score, label, by=by)
        except TracesRefused as exc:
            self._refuse(exc, 0)
            raise

    def stats(self) -> dict:
        return {
            "written": self.written,
            "pending": self.pending(),
            "dropped": self.dropped,
            "failed": self.failed,
            "content": self.content,
            "refused": str(self.refused) if self.refused else None,
        }

    def close(self) -> None:
        """Stop taking rows, write what waits, and end the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        self.flush()

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda: (
                        self._closed or (len(self._pending) >= self.batch and not self._deferred)
                    ),
                    self.interval,
                )
                closed = self._closed
            self.flush()
            if closed:
                return

    def _keep(self, rows: list[dict]) -> None:
        """Put ROWS back in front of the queue, dropping the oldest past `max_pending`."""
        with self._cond:
            self._deferred = True
            self._pending.extendleft(reversed(rows))
            while len(self._pending) > self.max_pending:
                self._pending.popleft()
                self.dropped += 1

    def _refuse(self, exc: TracesRefused, lost: int) -> None:
        """Drop LOST rows, every queued one and every later one; warn once."""
        with self._cond:
            first = self.refused is None
            self.refused = exc
            self.dropped += lost + len(self._pending)
            self._pending.clear()
        if first:
            log.warning("no traces are recorded from now on: %s", exc)

    def _warn(self, exc: Exception) -> None:
        if not self._warned:
            self._warned = True
            log.error("writing traces failed (further failures are only counted): %s", exc)
