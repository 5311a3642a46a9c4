"""Recording served turns as traces, off the request path.

`TraceRecorder.record(row)` only appends to a bounded queue; a background thread writes the
queue in batches (every `interval` seconds, or as soon as `batch` rows wait) through the
`write(rows)` it was given (`mint.api.write_traces` on the repository). A slow or failing
database therefore never fails or slows a request.

One bad row never costs its batch-mates: text no database keeps (NUL, lone surrogates) is
replaced by U+FFFD when a row is queued, and a batch the database or the registry refuses is
written again row by row, so that only the rows refused alone are dropped (counted as
`invalid`, logged). A database that cannot take a batch now (locked past the writer's wait,
a full disk, out of reach) and a registry out of reach are "try again later" alike: the
batch goes back to the front of the queue and is tried again an interval later (counted in
`retries`, logged once), within the queue's bounds, in rows (`max_pending`) and in bytes
(`max_pending_bytes`, the rows' text as UTF-8), past which the oldest rows are dropped and
counted. A `write` may return how many rows it wrote, or (written, [(index, why), ...])
naming rows it skipped as invalid. It may raise `TracesDeferred` (try later) or
`TracesRefused` (the registry refuses the token: one warning, and every row from then on is
dropped, with no more tries).

`pending` counts every row acknowledged and not yet stored, the batch being written included
(`in_flight`): what a crash would lose. `flush()` writes what waits now. Feedback needs its
trace stored first and never waits on a blocked write: while its trace's batch cannot be
written, or the database cannot take the feedback within the writer's wait, it is refused
as busy (503, try again later). `close()` flushes, trying again for up to `close_wait`
seconds, and stops the thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from mint.errors import (
    DatabaseUnavailable,
    Forbidden,
    RegistryError,
    RegistryUnreachable,
    SchemaOutdated,
    Unauthenticated,
)
from mint.exchange.received import UNSTORABLE_TEXT
from mint.ids import utcnow
from mint.runtime.pipeline import TurnResult

log = logging.getLogger("mint.runtime")

MAX_USER = 200  # characters of a request's `user` kept (the column's width)
MAX_PENDING = 10_000  # rows waiting to be written
MAX_PENDING_BYTES = 64 << 20  # bytes of rows waiting to be written
CLOSE_WAIT = 10.0  # seconds `close` keeps trying to write what waits
# The database out of reach, busy past the writer's wait, or its disk full: no row is to
# blame, and the batch is tried again later.
DOWN = (DatabaseUnavailable, sa.exc.OperationalError)


class TracesDeferred(Exception):
    """Traces could not be written now (the registry is out of reach); try again later."""


class TracesBusy(TracesDeferred):
    """The database cannot take this write now (locked, or a full disk); try again later."""


class TracesRefused(Exception):
    """Traces will never be written with these credentials (the registry refuses the token)."""


def through_registry(call: Callable, *, own_token: bool = True) -> Callable:
    """CALL (a write to a registry) with the registry's refusals as a recorder's: a refused
    token (401, 403) is TracesRefused (unless the token is a client's, not OWN_TOKEN: then the
    refusal is the client's, raised as it is); a registry out of reach or failing is
    TracesDeferred."""

    def wrapped(*args, **kwargs):
        try:
            return call(*args, **kwargs)
        except (Unauthenticated, Forbidden) as exc:
            if not own_token:
                raise
            raise TracesRefused(f"the registry refuses this server's token: {exc}") from None
        except (RegistryUnreachable, DatabaseUnavailable, SchemaOutdated) as exc:
            raise TracesDeferred(str(exc)) from None
        except RegistryError as exc:
            if (exc.status or 0) >= 500:
                raise TracesDeferred(str(exc)) from None
            raise

    return wrapped


def storable(value: Any) -> tuple[Any, int]:
    """VALUE with NUL and lone surrogates replaced by U+FFFD in every string (keys too), and
    about how many bytes it takes (its strings as UTF-8, 8 for any other leaf)."""
    size = 0

    def clean(item: Any) -> Any:
        nonlocal size
        if isinstance(item, str):
            if UNSTORABLE_TEXT.search(item):
                item = UNSTORABLE_TEXT.sub("\ufffd", item)
            size += len(item) if item.isascii() else len(item.encode("utf-8"))
            return item
        if isinstance(item, dict):
            return {clean(k): clean(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [clean(v) for v in item]
        size += 8
        return item

    return clean(value), size


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
        max_pending: int = MAX_PENDING,
        max_pending_bytes: int = MAX_PENDING_BYTES,
        close_wait: float = CLOSE_WAIT,
        busy: type[TracesDeferred] = TracesBusy,
        on_close: Callable[[], Any] | None = None,
    ):
        """`write(rows)` stores a batch; `feedback(trace_id, score, label, by=..., token=...)`
        records feedback (None: feedback is refused); `content=False` keeps no messages or
        answers; BUSY is what feedback raises while its trace cannot be stored yet;
        ON_CLOSE runs once the last rows are written."""
        self._write, self._feedback = write, feedback
        self.content, self.interval, self.batch = content, interval, batch
        self.max_pending, self.max_pending_bytes = max_pending, max_pending_bytes
        self.close_wait, self._busy, self._on_close = close_wait, busy, on_close
        self.written = self.dropped = self.failed = self.invalid = self.retries = 0
        self._pending: deque[tuple[dict, int]] = deque()  # (row, its size in bytes)
        self._bytes = 0
        self._inflight: list[tuple[dict, int]] = []  # the batch being written
        self._ids: set[Any] = set()  # ids of the rows queued or in flight
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
        """Queue ROW (its text made storable); False (and counted) when the queue is full,
        in rows or in bytes, or the recorder closed."""
        row, size = storable(row)
        with self._cond:
            flying = sum(size for _, size in self._inflight)
            full = (
                len(self._pending) + len(self._inflight) >= self.max_pending
                or self._bytes + flying + size > self.max_pending_bytes
            )
            if self._closed or self.refused or full:
                self.dropped += 1
                return False
            self._pending.append((row, size))
            self._bytes += size
            self._ids.add(row.get("id"))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="mint-traces", daemon=True)
                self._thread.start()
            if len(self._pending) >= self.batch:
                self._cond.notify()
        return True

    def pending(self) -> int:
        """Rows acknowledged and not yet stored: queued, or in the batch being written."""
        with self._cond:
            return len(self._pending) + len(self._inflight)

    def flush(self) -> int:
        """Write every queued row now; returns how many were written."""
        with self._write_lock:
            return self._flush_locked()

    def _flush_locked(self) -> int:
        with self._cond:
            queued = list(self._pending)
            self._pending.clear()
            self._bytes = 0
            self._inflight = queued
        if not queued:
            return 0
        try:
            written = self._write_batch(queued)
        finally:
            with self._cond:
                self._inflight = []
                waiting = {row.get("id") for row, _ in self._pending}
                self._ids.difference_update({row.get("id") for row, _ in queued} - waiting)
        self.written += written
        return written

    def feedback(
        self,
        trace_id: str,
        score: Any,
        label: Any = None,
        *,
        by: str | None = None,
        token: str | None = None,
    ):
        """Record feedback on a trace, its trace stored first if it waits; never waits on a
        blocked write (BUSY: try again later). BY: who gave it; TOKEN: a registry token of
        the client's own, to record it with (see `recorder_for`)."""
        if self._feedback is None:
            raise RuntimeError("this recorder takes no feedback")
        self._settle(trace_id)
        if self.refused is not None:
            raise TracesRefused(str(self.refused))
        try:
            if token is not None:
                return self._feedback(trace_id, score, label, by=by, token=token)
            return self._feedback(trace_id, score, label, by=by)
        except TracesRefused as exc:
            if token is None:  # the server's own token is refused; a client's is its own
                self._refuse(exc, 0)
            raise
        except DatabaseUnavailable:
            raise
        except sa.exc.OperationalError as exc:  # locked past the writer's wait, a full disk
            raise self._busy(f"the database cannot take feedback now: {_first(exc)}") from None

    def _settle(self, trace_id: str) -> None:
        """Write what waits before feedback is recorded, as a batch would (its trace among
        it, when TRACE_ID still waits); BUSY when its own trace cannot be stored now (the
        batch is blocked, or kept for later). Never waits on a write the database is known
        not to take: with the last batch kept, only a feedback whose trace waits tries."""
        with self._cond:
            mine = trace_id in self._ids
            waiting = bool(self._pending or self._inflight)
        if not waiting or (not mine and self._deferred):
            return
        if not self._write_lock.acquire(timeout=self.interval):
            if mine:
                raise self._busy("its trace is being written; try again later")
            return
        try:
            self._flush_locked()
        finally:
            self._write_lock.release()
        with self._cond:
            if trace_id in self._ids:
                raise self._busy("its trace cannot be stored now; try again later")

    def stats(self) -> dict:
        with self._cond:
            in_flight = len(self._inflight)
            pending = len(self._pending) + in_flight
            pending_bytes = self._bytes + sum(size for _, size in self._inflight)
        return {
            "written": self.written,
            "pending": pending,
            "in_flight": in_flight,
            "pending_bytes": pending_bytes,
            "dropped": self.dropped,
            "failed": self.failed,
            "invalid": self.invalid,
            "retries": self.retries,
            "content": self.content,
            "refused": str(self.refused) if self.refused else None,
        }

    def close(self) -> None:
        """Stop taking rows, write what waits (trying again for up to `close_wait` seconds
        while the database cannot take it), and end the thread; rows still unwritten then
        are counted as failed and logged."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        deadline = time.monotonic() + self.close_wait
        while True:
            self.flush()
            if not self.pending() or self.refused is not None or time.monotonic() >= deadline:
                break
            time.sleep(min(self.interval, max(0.0, deadline - time.monotonic())))
        with self._cond:
            lost = len(self._pending)
            self._pending.clear()
            self._ids.clear()
            self._bytes = 0
            self.failed += lost
        if lost:
            log.error("%d traces could not be written before the server stopped", lost)
        if self._on_close is not None:
            self._on_close()

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
            if closed:
                return
            self.flush()

    def _write_batch(self, queued: list[tuple[dict, int]]) -> int:
        """Write QUEUED's rows as one batch; a batch refused for a reason other than the
        database or the registry being unable to take it now is written again row by row."""
        rows = [row for row, _ in queued]
        try:
            result = self._write(rows)
        except TracesRefused as exc:
            self._refuse(exc, len(rows))
            return 0
        except (TracesDeferred, *DOWN) as exc:  # no row is to blame: all of them wait
            self._keep(queued, exc)
            return 0
        except Exception as exc:  # noqa: BLE001 - a database failure must not reach a request
            if len(rows) == 1:
                self._drop_invalid(rows[0], exc)
                return 0
            return self._one_by_one(queued)
        self._deferred = False
        written, skipped = _outcome(result)
        for index, why in skipped:
            self._drop_invalid(rows[index], why)
        return written

    def _one_by_one(self, queued: list[tuple[dict, int]]) -> int:
        """Write each row of a refused batch alone: only those refused alone are dropped."""
        written = 0
        for i, (row, _) in enumerate(queued):
            try:
                n, skipped = _outcome(self._write([row]))
            except TracesRefused as exc:
                self._refuse(exc, len(queued) - i)
                break
            except (TracesDeferred, *DOWN) as exc:
                self._keep(queued[i:], exc)
                return written
            except Exception as exc:  # noqa: BLE001 - this row is the bad one
                self._drop_invalid(row, exc)
                continue
            written += n
            for _, why in skipped:
                self._drop_invalid(row, why)
        self._deferred = False
        return written

    def _drop_invalid(self, row: dict, why: object) -> None:
        """Count a row that cannot be written, whatever its batch-mates; the first ten are
        logged, then every hundredth."""
        self.invalid += 1
        if self.invalid <= 10 or self.invalid % 100 == 0:
            log.warning(
                "dropped trace %s, which cannot be recorded (%d so far): %s",
                str(row.get("id"))[:64],
                self.invalid,
                str(why)[:300],
            )

    def _keep(self, queued: list[tuple[dict, int]], exc: Exception) -> None:
        """Put QUEUED back in front of the queue, to be tried an interval later, dropping the
        oldest past the bounds."""
        with self._cond:
            self._deferred = True
            self.retries += 1
            self._pending.extendleft(reversed(queued))
            self._bytes += sum(size for _, size in queued)
            while self._pending and (
                len(self._pending) > self.max_pending or self._bytes > self.max_pending_bytes
            ):
                _, size = self._pending.popleft()
                self._bytes -= size
                self.dropped += 1
        self._warn(exc)

    def _refuse(self, exc: TracesRefused, lost: int) -> None:
        """Drop LOST rows, every queued one and every later one; warn once."""
        with self._cond:
            first = self.refused is None
            self.refused = exc
            self.dropped += lost + len(self._pending)
            self._pending.clear()
            self._ids.clear()
            self._bytes = 0
        if first:
            log.warning("no traces are recorded from now on: %s", exc)

    def _warn(self, exc: Exception) -> None:
        if not self._warned:
            self._warned = True
            log.error(
                "writing traces must wait (tried again every %gs; further waits are only "
                "counted): %s",
                self.interval,
                _first(exc),
            )


def _first(exc: BaseException) -> str:
    """The first line of EXC's message (a database error's SQL and parameters left out)."""
    text = str(getattr(exc, "orig", None) or exc)
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _outcome(result: Any) -> tuple[int, list[tuple[int, str]]]:
    """(written, skipped) of what a `write` returned: a count, or a count and the rows it
    skipped as invalid, by index."""
    if isinstance(result, tuple):
        written, skipped = result
        return int(written), [(int(i), str(why)) for i, why in skipped]
    return int(result or 0), []
