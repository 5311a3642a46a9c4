"""Gathering concurrent turns into batches: a short window, a size limit, one worker thread.

A `Ticket` is one submitted turn: it holds the lease on the version the turn started on, a
future for its result and, for a streaming caller, `on_event(kind, value)`:

- `("route", fields)` once the route stage ran (the label, the set, whether it fell back),
- `("text", delta)` as the answer is decoded,
- `("done", TurnResult)`, `("error", exception)` or `("cancelled", None)` at the end.

A turn that fails by itself (its text cannot be tokenized, say) is failed at once by
`Ticket.fail` while its batch goes on; see `pipeline.run_turns` and `isolation`.

The `Scheduler`'s worker waits for a first ticket, gathers more for up to `window` seconds or
until `max_batch` are waiting, and hands the batch to its `run` callable, its short
conversations first and its long ones after them (`by_length`). Batches run one after the
other, except that a batch of long turns calls `Scheduler.between()` between its stages
(route, answer, summary) and between the decoding steps of its answers and summaries, where
the short turns that arrived meanwhile run as a batch of their own: a short chat waits for one
forward pass of a long batch (its prompt's, at most), not for the whole batch. A swap (which
injects adapters under the model lock) lands between forward passes, never inside one.
`BatchPolicy(window=0, max_batch=1)` serves one turn at a time.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any

from mint.runtime import prompts
from mint.runtime.errors import NotServing, TurnCancelled
from mint.runtime.pipeline import TurnJob, TurnResult

log = logging.getLogger("mint.runtime")

OnEvent = Callable[[str, Any], None]


@dataclass(frozen=True)
class BatchPolicy:
    """How turns are gathered: wait up to `window` seconds for up to `max_batch` of them."""

    window: float = 0.005
    max_batch: int = 16

    def __post_init__(self):
        if self.window < 0 or self.max_batch < 1:
            raise ValueError("a batch window is >= 0 seconds and a batch holds >= 1 turn")

    @classmethod
    def off(cls) -> BatchPolicy:
        """One turn at a time, with no wait."""
        return cls(window=0.0, max_batch=1)


class Ticket:
    """One submitted turn. `result()` waits for it; `cancel()` stops it at the next token."""

    def __init__(self, job: TurnJob, lease: Any, on_event: OnEvent | None = None):
        self.lease, self.engine = lease, lease.engine
        self.future: Future[TurnResult] = Future()
        self.submitted = time.perf_counter()
        self._on_event = on_event
        self._cancel = threading.Event()
        self.chars = sum(len(prompts.text_of(m.get("content"))) for m in job.messages)
        self.long = self.chars > long_text(self.engine)
        self._finished = False
        self._failed = False  # failed alone while its batch went on (see `fail`)
        self.job = TurnJob(
            job.messages,
            job.expert,
            job.max_new_tokens,
            job.summary_tokens,
            on_route=self._routed,
            on_text=self._text if on_event else None,
            cancelled=self._cancel.is_set,
            on_error=self.fail,
        )

    def cancel(self) -> None:
        """Ask the worker to stop this turn (a no-op once it finished)."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def result(self, timeout: float | None = None) -> TurnResult:
        """The turn's result; raises what the turn raised."""
        return self.future.result(timeout)

    def started(self) -> TurnJob:
        """The job to run, with the time it waited in the queue."""
        return dataclasses.replace(self.job, queued=time.perf_counter() - self.submitted)

    def fail(self, error: BaseException) -> None:
        """Fail this turn now, while the rest of its batch runs on: settle the future and
        tell a streaming caller. The lease ends with the batch (`finish`), which still uses
        the version."""
        if self._finished or self._failed:
            return
        self._failed = True
        self._settle(error=error)
        self.emit("error", error)

    def finish(self, result: TurnResult | None, error: BaseException | None = None) -> None:
        """Settle the future, tell a streaming caller and end the lease (once)."""
        if self._finished:
            return
        self._finished = True
        try:
            if self._failed:
                pass  # settled by `fail`; only the lease is left to end
            elif error is not None:
                self._settle(error=error)
                self.emit("error", error)
            elif result is None or result.finish_reason == "cancelled":
                self._settle(error=TurnCancelled("the caller cancelled the turn"))
                self.emit("cancelled", None)
            else:
                self._settle(result=result)
                self.emit("done", result)
        finally:
            self.lease.release()

    def _settle(self, result: TurnResult | None = None, error: BaseException | None = None):
        try:
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(result)
        except InvalidStateError:  # the caller gave up waiting and cancelled the future
            pass

    def emit(self, kind: str, value: Any) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(kind, value)
        except Exception as exc:  # noqa: BLE001 - a gone listener must not stop the batch
            log.debug("a turn's listener failed: %s", exc)
            self.cancel()

    def _routed(self, label: str, fallback: str | None) -> None:
        spec = self.engine.spec
        fields = {
            "route": label,
            "set": spec.id,
            "set_name": spec.name,
            "direct": self.job.expert is not None,
            "route_fallback": fallback,
        }
        self.emit("route", fields)

    def _text(self, delta: str) -> None:
        self.emit("text", delta)


LONG_TEXT = 4096  # characters of conversation: past this, a prompt is long for most models


def long_text(engine: Any) -> int:
    """Characters past which a conversation is long on this engine's base: LONG_TEXT, or two
    characters a position on a base with fewer than 2048 (text runs at about four characters
    a token, so a longer one fills about half the context: the tiny demo base's 512 positions
    are full at 3 KB)."""
    positions = getattr(getattr(engine, "base", None), "max_positions", None)
    return min(LONG_TEXT, 2 * positions) if isinstance(positions, int) else LONG_TEXT


def is_long(ticket: Ticket) -> bool:
    """Whether a ticket's conversation is long for its base (see `long_text`)."""
    return bool(getattr(ticket, "long", False))


def by_length(batch: Sequence[Ticket]) -> list[list[Ticket]]:
    """A gathered batch as it runs: the turns of short conversations first, the long ones
    (`is_long`) after them, on their own. A long prompt pads every row it shares
    a decoding call with to its length, and a batch answers when its last turn is done: so
    short turns run, and are answered, without waiting for one client's long prompts."""
    short = [t for t in batch if not is_long(t)]
    long = [t for t in batch if is_long(t)]
    return [part for part in (short, long) if part]


class Scheduler:
    """One worker thread that runs gathered tickets with `run(batch)`, batch after batch."""

    def __init__(self, run: Callable[[list[Ticket]], None], policy: BatchPolicy | None = None):
        self.run, self.policy = run, policy or BatchPolicy()
        self._queue: deque[Ticket] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._worker: threading.Thread | None = None
        self._in_long = False  # the worker runs a batch of long turns (see `between`)

    def submit(self, ticket: Ticket) -> None:
        """Queue a ticket; raises NotServing once closed."""
        with self._cond:
            if self._closed:
                raise NotServing("the runtime is closed")
            self._queue.append(ticket)
            if self._worker is None:
                self._worker = threading.Thread(target=self._loop, name="mint-batch", daemon=True)
                self._worker.start()
            self._cond.notify_all()

    def waiting(self) -> int:
        """How many tickets wait for a batch."""
        with self._cond:
            return len(self._queue)

    def close(self) -> None:
        """Finish the batch in progress; refuse the tickets still waiting (NotServing)."""
        with self._cond:
            self._closed = True
            left = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
            worker = self._worker
        for ticket in left:
            ticket.finish(None, NotServing("the runtime closed before the turn ran"))
        if worker is not None and worker is not threading.current_thread():
            worker.join()

    def between(self) -> bool:
        """Run the short turns waiting now, as one batch, then return to the caller; whether
        any ran.

        A batch of long turns calls this between its stages and its decoding steps, on the
        worker thread; anywhere else (another thread, a batch of short turns, the short batch
        run from here) it does nothing, so short turns never wait behind one another and a
        long batch yields at most one short batch at a time."""
        if not self._in_long or threading.current_thread() is not self._worker:
            return False
        with self._cond:
            short = [t for t in self._queue if not is_long(t)][: self.policy.max_batch]
            for ticket in short:
                self._queue.remove(ticket)
        if not short:
            return False
        self._in_long = False
        try:
            self._start(short)
        finally:
            self._in_long = True
        return True

    def _loop(self) -> None:
        while (batch := self._gather()) is not None:
            self._start(batch)

    def _start(self, batch: Sequence[Ticket]) -> None:
        """Run a gathered batch, its short turns first (cancelled ones are finished here)."""
        live = [t for t in batch if not t.cancelled]
        for ticket in batch:
            if ticket.cancelled:
                ticket.finish(None)
        for part in by_length(live):
            self._in_long = is_long(part[0])
            try:
                self._run(part)
            finally:
                self._in_long = False

    def _run(self, batch: Sequence[Ticket]) -> None:
        try:
            self.run(list(batch))
        except BaseException as exc:  # noqa: BLE001 - the worker outlives any one batch
            log.exception("a batch failed")
            for ticket in batch:
                ticket.finish(None, exc)

    def _gather(self) -> list[Ticket] | None:
        """The next batch (None once closed): wait for one ticket, then up to the window."""
        policy = self.policy
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            deadline = time.monotonic() + policy.window
            while len(self._queue) < policy.max_batch and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            count = min(policy.max_batch, len(self._queue))
            return [self._queue.popleft() for _ in range(count)]
