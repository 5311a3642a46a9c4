"""The runtime: `Runtime` serves one set version, stages the next beside it, swaps between
batches, splits a canary's share off, and follows a channel (see `following`).

A request takes a `Lease` on the version that is active when it is submitted and runs to the
end on it, whatever is swapped in meanwhile. Requests run in batches gathered by a `Scheduler`
(see `batching`); a batch holds requests of one version per pass through the pipeline.
Staging loads and checks everything first (see `load_engine`); if it fails, nothing changes
for the version serving, and the failure is counted and logged.

A version swapped out stays in the CPU tier (`residency`) while its bound allows, so serving it
again is a swap of pointers; past the bound, the least recently used idle version is unloaded.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mint.objects import SetSpec
from mint.runtime.batching import BatchPolicy, OnEvent, Scheduler, Ticket
from mint.runtime.engine import Engine, Verify, load_engine
from mint.runtime.errors import NothingStaged, NotServing
from mint.runtime.following import Following, Watch
from mint.runtime.loader import SharedBase
from mint.runtime.metrics import Metrics
from mint.runtime.pipeline import (
    DEFAULT_MAX_NEW_TOKENS,
    TurnJob,
    TurnResult,
    check_turn,
    run_turns,
)
from mint.runtime.residency import Lease, Slot, Tier
from mint.runtime.split import CANARY, Split, split_lines

log = logging.getLogger("mint.runtime")


@dataclass(frozen=True)
class SwapRecord:
    """One attempt to change the serving version."""

    at: float  # time.time()
    old: str | None
    new: str
    ok: bool
    seconds: float  # time spent staging
    error: str | None = None
    resident: bool = False  # served again from the CPU tier: nothing was loaded


class Runtime(Following):
    """Holds the active set version on one shared base, and swaps it without dropping requests."""

    split = property(lambda self: self._split, doc="The canary's split served, if any.")

    def __init__(
        self,
        base: SharedBase,
        *,
        verify: Verify | None = None,
        metrics: Metrics | None = None,
        resolve: Callable[[], str] | None = None,
        load_spec: Callable[[str], SetSpec] | None = None,
        poll_interval: float = 0.5,
        retry_after: float = 10.0,
        batching: BatchPolicy | None = None,
        max_cpu_adapters: int = 0,
        watch: Watch | None = None,
        load: Callable[[SetSpec], Engine] | None = None,
    ):
        """`verify(spec)` raises when a member's bytes are not what was committed (store verify).

        `resolve()` returns the channel's current set commit and `load_spec(commit)` its
        SetSpec; both are needed only to `follow()` a channel. A commit that failed to stage
        is tried again only after `retry_after` seconds (or when the channel moves on).
        `batching` says how requests are gathered (`BatchPolicy.off()`: one at a time);
        `max_cpu_adapters` bounds the adapters kept loaded, retired versions' included
        (0: a version is unloaded as soon as it stops serving and no request holds it).
        `watch` (see `Watch`) tells the follower when to check, instead of a timer.
        `load(spec)` checks and loads a version (default `load_engine`; see `vllm_engine`).
        """
        self.base, self.verify = base, verify
        self.load = load or (lambda spec: load_engine(base, spec, verify=verify))
        self.metrics = metrics or Metrics()
        self.metrics.serving = self._serving
        self.metrics.resident = lambda: len(self.resident())
        self.resolve, self.load_spec = resolve, load_spec
        self.poll_interval, self.retry_after = poll_interval, retry_after
        self.history: list[SwapRecord] = []
        self._lock = threading.Lock()  # guards the slots; never held while the model runs
        self._change = threading.RLock()  # one stage or swap at a time
        self._active: Slot | None = None
        self._staged: Slot | None = None
        self._tier = Tier(max_cpu_adapters)
        self._scheduler = Scheduler(self._run_batch, batching)
        self._stop = threading.Event()
        self._follower: threading.Thread | None = None
        self._failed: tuple[str, float] | None = None
        self.watch = watch
        self._wake, self._watcher = threading.Event(), None  # the watcher: a Thread
        self.variant, self.rev = "production", None  # traces' name; what it serves, as given
        self.recorder = None  # a TraceRecorder, when turns are recorded (see `traces`)
        self.canary_of: Callable[[], object | None] | None = None  # the open canary, if any
        self.admit: Callable[[str], object] | None = None  # raises for a commit not to serve
        self._split: Split | None = None

    # --- serving ---------------------------------------------------------------------

    @property
    def active(self) -> Engine | None:
        """The engine new requests go to."""
        slot = self._active
        return slot.engine if slot else None

    @property
    def staged(self) -> Engine | None:
        slot = self._staged
        return slot.engine if slot else None

    @property
    def batching(self) -> BatchPolicy:
        return self._scheduler.policy

    def lease(self, user: str | None = None) -> Lease:
        """Hold the active version for one request (or the canary's, for the requests the
        split sends there; USER makes the choice sticky). Raises NotServing before the
        first swap."""
        with self._lock:
            slot, variant, split = self._active, self.variant, self._split
            if slot is None:
                raise NotServing("no set version is being served")
            if split is not None and split.takes(user):
                slot, variant = split.slot, CANARY
            slot.leases += 1
        return Lease(self, slot, variant)

    def submit(
        self,
        messages: Sequence[dict],
        *,
        model: str | None = None,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        on_event: OnEvent | None = None,
        user: str | None = None,
    ) -> Ticket:
        """Queue one turn on the active version; it runs in the next batch.

        `model` names the set (routed) or one of its experts (that expert answers, no
        routing); a name the active version does not serve raises UnknownModel, a
        conversation without a user message EmptyConversation, both before anything is
        queued. `on_event(kind, value)` receives the turn's events (see `batching`); `user`
        (the request's) keeps a user on one side of a canary split.
        """
        lease = self.lease(user)
        try:
            expert = lease.engine.expert_for(model) if model is not None else None
            check_turn(lease.engine, messages, expert)
            ticket = Ticket(TurnJob(messages, expert, max_new_tokens), lease, on_event)
            self._scheduler.submit(ticket)
        except BaseException:
            lease.release()
            raise
        return ticket

    def turn(
        self,
        messages: Sequence[dict],
        *,
        model: str | None = None,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    ) -> TurnResult:
        """Run one turn on the active version (in a batch with whatever else is waiting)."""
        return self.submit(messages, model=model, max_new_tokens=max_new_tokens).result()

    def _run_batch(self, tickets: list[Ticket]) -> None:
        """Run a gathered batch: one pass through the pipeline per set version in it."""
        self.metrics.batch(len(tickets))
        groups: dict[int, list[Ticket]] = {}
        for ticket in tickets:
            groups.setdefault(id(ticket.engine), []).append(ticket)
        for group in groups.values():
            try:
                jobs = [t.started() for t in group]
                results = run_turns(group[0].engine, jobs, self._scheduler.between)
            except Exception as exc:  # noqa: BLE001 - every request of the group gets the error
                log.exception("a batch of %d turns failed", len(group))
                for ticket in group:
                    ticket.finish(None, exc)
                continue
            for ticket, result in zip(group, results):
                if result.finish_reason == "cancelled":
                    self.metrics.cancelled(result.completion_tokens)
                else:
                    fallback = result.route_fallback is not None
                    self.metrics.turn(
                        result.route, result.latency, fallback, result.completion_tokens
                    )
                ticket.finish(result)

    def leases(self) -> int:
        """How many requests hold a version now (queued or running)."""
        with self._lock:
            slots = [self._active, self._staged, self._canary_slot(), *self._tier.slots()]
            return sum(slot.leases for slot in slots if slot is not None)

    def resident(self) -> list[str]:
        """Set commits kept loaded after they stopped serving, least recently used first."""
        with self._lock:
            return self._tier.ids()

    def _release(self, slot: Slot) -> None:
        with self._lock:
            slot.leases -= 1
            idle = slot.retired and slot.leases == 0
        if idle:
            self._trim()

    def _retire(self, slot: Slot) -> None:
        """Move a slot that stopped serving or being staged to the tier (under the lock)."""
        serving = (self._active, self._staged, self._canary_slot())
        current = {s.engine.id for s in serving if s is not None}
        if slot.engine.id in current:  # a second engine of a version that serves on
            self._tier.discard(slot)
        else:
            self._tier.keep(slot)

    def _trim(self) -> None:
        """Unload the least recently used retired versions past the tier's bound."""
        loaded = self.base.loaded()
        with self._lock:
            victims = self._tier.victims(loaded)
        for slot in victims:
            slot.engine.close()

    def _canary_slot(self) -> Slot | None:
        return self._split.slot if self._split is not None else None

    @property
    def canary(self) -> Engine | None:
        """The engine a canary's share of requests goes to (None without a canary)."""
        split = self._split
        return split.slot.engine if split is not None else None

    def _serving(self) -> tuple[str, str] | None:
        engine = self.active
        return (engine.spec.name, engine.id) if engine else None

    # --- changing version --------------------------------------------------------------

    def stage(self, spec: SetSpec) -> Engine:
        """Load and check `spec` beside the serving version. On failure nothing changes.

        A version still resident in the CPU tier is taken back from it: nothing is read."""
        with self._change:
            started = time.perf_counter()
            with self._lock:
                slot = self._tier.take(spec.id)
            if slot is not None:
                slot.from_tier = True
            else:
                try:
                    engine = self.load(spec)
                except Exception as exc:
                    self._record_failure(spec.id, exc, time.perf_counter() - started)
                    raise
                slot = Slot(engine)
            slot.stage_seconds = time.perf_counter() - started
            with self._lock:
                previous, self._staged = self._staged, slot
                if previous is not None:
                    self._retire(previous)
            self._trim()
            return slot.engine

    def swap(self) -> str:
        """Make the staged version active; the old one goes to the CPU tier."""
        with self._change:
            with self._lock:
                if self._staged is None:
                    raise NothingStaged("nothing is staged")
                old, self._active, self._staged = self._active, self._staged, None
                new, at = self._active, time.time()  # requests from now on run on `new`
                if old is not None:
                    self._retire(old)
            self._trim()
            self.metrics.swapped()
            self._failed = None
            old_id = old.engine.id if old else None
            seconds, resident = new.stage_seconds, new.from_tier
            self._remember(SwapRecord(at, old_id, new.engine.id, True, seconds, None, resident))
            took, was = (seconds + time.time() - at) * 1000, old_id[:12] if old_id else "nothing"
            note = " (resident: nothing loaded)" if resident else ""
            where = self.rev or new.engine.spec.name
            log.info("swap %s: %s -> %s in %.0f ms%s", where, was, new.engine.id[:12], took, note)
            return new.engine.id

    def update(self, spec: SetSpec) -> bool:
        """Stage and swap in one call; False (old version still serving) when staging failed."""
        with self._change:
            try:
                self.stage(spec)
            except Exception:  # noqa: BLE001 - counted and logged by stage()
                return False
            self.swap()
            return True

    def update_to(self, commit_id: str) -> bool:
        """Serve set commit `commit_id`: from the CPU tier when it is resident, else fetched
        with `load_spec` and loaded; False when it cannot be."""
        with self._lock:
            slot = self._tier.get(commit_id)
        try:
            spec = self._resident_spec(slot) if slot is not None else self.load_spec(commit_id)
        except Exception as exc:  # noqa: BLE001 - any failure leaves the old version serving
            self._record_failure(commit_id, exc, 0.0)
            return False
        return self.update(spec)

    def _resident_spec(self, slot: Slot) -> SetSpec:
        """The spec of a version resident in the CPU tier, admitted again first (`admit`: a
        key trusted when it was loaded may not be any more)."""
        if self.admit is not None:
            self.admit(slot.engine.id)
        return slot.engine.spec

    def _record_failure(self, commit_id: str, exc: Exception, seconds: float) -> None:
        self.metrics.swap_failed()
        self._failed = (commit_id, time.monotonic())
        active = self.active.id if self.active else None
        why = f"{type(exc).__name__}: {exc}"
        self._remember(SwapRecord(time.time(), active, commit_id, False, seconds, why))
        serving = active[:12] if active else "nothing"
        log.error(
            "staging set %s failed, still serving %s: %s (tried again in %g s, or when the "
            "channel moves)",
            commit_id[:12], serving, exc, self.retry_after,
        )  # fmt: skip

    def _remember(self, record: SwapRecord) -> None:
        self.history = (self.history + [record])[-100:]
        self.metrics.changed()

    # --- a canary's split ---------------------------------------------------------------

    def set_canary(self, canary, *, why: str = "stopped") -> bool:
        """Serve CANARY's candidate beside the holder (None: end the split, for WHY, which the
        log says). Its version is taken from the CPU tier when resident, else loaded and
        checked; on failure nothing changes. True when the split changed."""
        with self._change:
            slot = None
            if canary is not None:
                try:
                    slot = self._canary_version(canary.candidate)
                except Exception:  # noqa: BLE001 - counted and logged by _record_failure
                    return False
            with self._lock:
                old = self._split
                self._split = Split(canary, slot) if slot is not None else None
                if old is not None:
                    self._retire(old.slot)
            if old is None and slot is None:
                return False
            self._trim()
            where = self.rev or (self.active.spec.name if self.active else "?")
            holder = self.active.id[:12] if self.active else "nothing"
            for line in split_lines(where, old, canary if slot is not None else None, holder, why):
                log.info(line)
            self.metrics.changed()
            return True

    def _canary_version(self, commit: str) -> Slot:
        started = time.perf_counter()
        with self._lock:
            slot = self._tier.get(commit)
        try:
            if slot is not None:
                self._resident_spec(slot)
                with self._lock:
                    slot = self._tier.take(commit)
            if slot is not None:
                return slot
            spec = self.load_spec(commit)
            return Slot(self.load(spec))
        except Exception as exc:
            self._record_failure(commit, exc, time.perf_counter() - started)
            raise

    def close(self) -> None:
        """Stop following and batching, and unload every version; leases still held keep
        theirs alive until they end."""
        self.stop()
        self._scheduler.close()
        if self.recorder is not None:
            self.recorder.close()
        with self._lock:
            slots = [s for s in (self._active, self._staged, self._canary_slot()) if s]
            self._active = self._staged = self._split = None
            for slot in slots:
                self._tier.keep(slot)
            self._tier.max_adapters = 0
        self._trim()
        getattr(self.base, "close", lambda: None)()  # a vLLM base: its connections
