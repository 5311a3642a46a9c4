"""Recording served turns as traces, off the request path.

`TraceRecorder.record(row)` only appends to a bounded queue; a background thread writes the
queue in batches (every `interval` seconds, or as soon as `batch` rows wait) through the
`write(rows)` it was given (`mint.api.write_traces` on the repository). A slow or failing
database therefore never fails or slows a request.

One bad row never costs its batch-mates: text no database keeps (NUL, lone surrogates) is
replaced by U+FFFD when a row is queued, and a batch the database or the registry refuses is
written again row by row, so that only the rows refused alone are dropped (counted as
`invalid`, logged). A database out of reach fails the batch whole (counted as `failed`, logged
once). The queue is bounded in rows (`max_pending`) and in bytes (`max_pending_bytes`, the
rows' text as UTF-8): rows past either are dropped and counted. A `write` may return how many
rows it wrote, or (written, [(index, why), ...]) naming rows it skipped as invalid.
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

import sqlalchemy as sa

from mint.errors import (
    DatabaseUnavailable,
    Forbidden,
    RegistryError,
    RegistryUnreachable,
    SchemaOutdated,
    Unauthenticated,
)
from mint.ids import utcnow
from mint.received import UNSTORABLE_TEXT
from mint.runtime.pipeline import TurnResult

log = logging.getLogger("mint.runtime")

MAX_USER = 200  # characters of a request's `user` kept (the column's width)
MAX_PENDING = 10_000  # rows waiting to be written
MAX_PENDING_BYTES = 64 << 20  # bytes of rows waiting to be written
# The database out of reach, or busy past its timeout: a batch fails whole, with no row to blame.
DOWN = (DatabaseUnavailable, sa.exc.OperationalError)


class TracesDeferred(Exception):
    """Traces could not be written now (the registry is out of reach); try again later."""


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
    ):
        """`write(rows)` stores a batch; `feedback(trace_id, score, label, by=..., token=...)`
        records feedback (None: feedback is refused); `content=False` keeps no messages or
        answers."""
        self._write, self._feedback = write, feedback
        self.content, self.interval, self.batch = content, interval, batch
        self.max_pending, self.max_pending_bytes = max_pending, max_pending_bytes
        self.written = self.dropped = self.failed = self.invalid = 0
        self._pending: deque[tuple[dict, int]] = deque()  # (row, its size in bytes)
        self._bytes = 0
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
            full = (
                len(self._pending) >= self.max_pending
                or self._bytes + size > self.max_pending_bytes
            )
            if self._closed or self.refused or full:
                self.dropped += 1
                return False
            self._pending.append((row, size))
            self._bytes += size
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
                queued = list(self._pending)
                self._pending.clear()
                self._bytes = 0
            if not queued:
                return 0
            written = self._write_batch(queued)
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
        """Record feedback on a trace, after writing the traces still queued. BY: who gave it;
        TOKEN: a registry token of the client's own, to record it with (see `recorder_for`)."""
        if self._feedback is None:
            raise RuntimeError("this recorder takes no feedback")
        self.flush()
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

    def stats(self) -> dict:
        with self._cond:
            pending, pending_bytes = len(self._pending), self._bytes
        return {
            "written": self.written,
            "pending": pending,
            "pending_bytes": pending_bytes,
            "dropped": self.dropped,
            "failed": self.failed,
            "invalid": self.invalid,
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

    def _write_batch(self, queued: list[tuple[dict, int]]) -> int:
        """Write QUEUED's rows as one batch; a batch refused for a reason other than the
        database or the registry being out of reach is written again row by row."""
        rows = [row for row, _ in queued]
        try:
            result = self._write(rows)
        except TracesRefused as exc:
            self._refuse(exc, len(rows))
            return 0
        except TracesDeferred as exc:
            self._keep(queued)
            self._warn(exc)
            return 0
        except DOWN as exc:  # no row could be written: none is to blame
            self.failed += len(rows)
            self._warn(exc)
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
            except TracesDeferred as exc:
                self._keep(queued[i:])
                self._warn(exc)
                break
            except DOWN as exc:
                self.failed += len(queued) - i
                self._warn(exc)
                break
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

    def _keep(self, queued: list[tuple[dict, int]]) -> None:
        """Put QUEUED back in front of the queue, dropping the oldest past the bounds."""
        with self._cond:
            self._deferred = True
            self._pending.extendleft(reversed(queued))
            self._bytes += sum(size for _, size in queued)
            while self._pending and (
                len(self._pending) > self.max_pending or self._bytes > self.max_pending_bytes
            ):
                _, size = self._pending.popleft()
                self._bytes -= size
                self.dropped += 1

    def _refuse(self, exc: TracesRefused, lost: int) -> None:
        """Drop LOST rows, every queued one and every later one; warn once."""
        with self._cond:
            first = self.refused is None
            self.refused = exc
            self.dropped += lost + len(self._pending)
            self._pending.clear()
            self._bytes = 0
        if first:
            log.warning("no traces are recorded from now on: %s", exc)

    def _warn(self, exc: Exception) -> None:
        if not self._warned:
            self._warned = True
            log.error("writing traces failed (further failures are only counted): %s", exc)


def _outcome(result: Any) -> tuple[int, list[tuple[int, str]]]:
    """(written, skipped) of what a `write` returned: a count, or a count and the rows it
    skipped as invalid, by index."""
    if isinstance(result, tuple):
        written, skipped = result
        return int(written), [(int(i), str(why)) for i, why in skipped]
    return int(result or 0), []
