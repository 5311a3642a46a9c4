"""Hot swap: serve one set version, stage the next beside it, swap between requests.

A request takes a `Lease` on the version that is active when it starts and runs to the end
on it, whatever is swapped in meanwhile. A retired version is unloaded when its last lease
ends. Staging loads and checks everything first (see `load_engine`); if it fails, nothing
changes for the version serving, and the failure is counted and logged.

Following a channel: `follow()` starts a thread that calls `resolve()` every
`poll_interval` seconds and, when the channel names another commit, loads it with
`load_spec(commit)`, stages it and swaps it in.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mint.objects import SetSpec
from mint.runtime.engine import Engine, Verify, load_engine
from mint.runtime.errors import NothingStaged, NotServing
from mint.runtime.loader import SharedBase
from mint.runtime.metrics import Metrics
from mint.runtime.pipeline import DEFAULT_MAX_NEW_TOKENS, TurnResult, run_turn

log = logging.getLogger("mint.runtime")


class Lease:
    """One request's hold on an engine; `release()` (or leaving the `with`) ends it."""

    def __init__(self, runtime: Runtime, slot: _Slot):
        self._runtime, self._slot = runtime, slot
        self.engine: Engine = slot.engine
        self._done = False

    def release(self) -> None:
        if not self._done:
            self._done = True
            self._runtime._release(self._slot)

    def __enter__(self) -> Engine:
        return self.engine

    def __exit__(self, *exc) -> None:
        self.release()


class _Slot:
    """An engine with its count of requests in flight and whether it was swapped out."""

    def __init__(self, engine: Engine, stage_seconds: float = 0.0):
        self.engine = engine
        self.stage_seconds = stage_seconds
        self.leases = 0
        self.retired = False


@dataclass(frozen=True)
class SwapRecord:
    """One attempt to change the serving version."""

    at: float  # time.time()
    old: str | None
    new: str
    ok: bool
    seconds: float  # time spent staging
    error: str | None = None


class Runtime:
    """Holds the active set version on one shared base, and swaps it without dropping requests."""

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
    ):
        """`verify(spec)` raises when a member's bytes are not what was committed (store verify).

        `resolve()` returns the channel's current set commit and `load_spec(commit)` its
        SetSpec; both are needed only to `follow()` a channel. A commit that failed to stage
        is tried again only after `retry_after` seconds (or when the channel moves on).
        """
        self.base = base
        self.verify = verify
        self.metrics = metrics or Metrics()
        self.metrics.serving = self._serving
        self.resolve, self.load_spec = resolve, load_spec
        self.poll_interval, self.retry_after = poll_interval, retry_after
        self.history: list[SwapRecord] = []
        self._lock = threading.Lock()  # guards the slots; never held while the model runs
        self._change = threading.RLock()  # one stage or swap at a time
        self._active: _Slot | None = None
        self._staged: _Slot | None = None
        self._stop = threading.Event()
        self._follower: threading.Thread | None = None
        self._failed: tuple[str, float] | None = None

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

    def lease(self) -> Lease:
        """Hold the active version for one request. Raises NotServing before the first swap."""
        with self._lock:
            slot = self._active
            if slot is None:
                raise NotServing("no set version is being served")
            slot.leases += 1
        return Lease(self, slot)

    def turn(
        self,
        messages: Sequence[dict],
        *,
        model: str | None = None,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    ) -> TurnResult:
        """Run one turn on the active version and count it in the metrics.

        `model` names the set (routed) or one of its experts (that expert answers, no
        routing); a name the active version does not serve raises UnknownModel.
        """
        with self.lease() as engine:
            expert = engine.expert_for(model) if model is not None else None
            result = run_turn(engine, messages, expert=expert, max_new_tokens=max_new_tokens)
        self.metrics.turn(result.route, result.latency, result.route_fallback is not None)
        return result

    def _release(self, slot: _Slot) -> None:
        with self._lock:
            slot.leases -= 1
            unload = slot.retired and slot.leases == 0
        if unload:
            slot.engine.close()

    def _serving(self) -> tuple[str, str] | None:
        engine = self.active
        return (engine.spec.name, engine.id) if engine else None

    # --- changing version --------------------------------------------------------------

    def stage(self, spec: SetSpec) -> Engine:
        """Load and check `spec` beside the serving version. On failure nothing changes."""
        with self._change:
            started = time.perf_counter()
            try:
                engine = load_engine(self.base, spec, verify=self.verify)
            except Exception as exc:
                self._record_failure(spec.id, exc, time.perf_counter() - started)
                raise
            with self._lock:
                previous, self._staged = self._staged, _Slot(engine, time.perf_counter() - started)
            if previous is not None:
                previous.engine.close()
            return engine

    def swap(self) -> str:
        """Make the staged version active; the old one is unloaded when its last request ends."""
        with self._change:
            with self._lock:
                if self._staged is None:
                    raise NothingStaged("nothing is staged")
                old, self._active, self._staged = self._active, self._staged, None
                new, at = self._active, time.time()  # requests from now on run on `new`
                unload = old is not None and old.leases == 0
                if old is not None:
                    old.retired = True
            if unload:
                old.engine.close()
            self.metrics.swapped()
            self._failed = None
            old_id = old.engine.id if old else None
            self._remember(SwapRecord(at, old_id, new.engine.id, True, new.stage_seconds))
            log.info("serving set %s", new.engine.id[:12])
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
        """Serve set commit `commit_id`, fetched with `load_spec`; False when it cannot be."""
        try:
            spec = self.load_spec(commit_id)
        except Exception as exc:  # noqa: BLE001 - any failure leaves the old version serving
            self._record_failure(commit_id, exc, 0.0)
            return False
        return self.update(spec)

    def _record_failure(self, commit_id: str, exc: Exception, seconds: float) -> None:
        self.metrics.swap_failed()
        self._failed = (commit_id, time.monotonic())
        active = self.active.id if self.active else None
        why = f"{type(exc).__name__}: {exc}"
        self._remember(SwapRecord(time.time(), active, commit_id, False, seconds, why))
        serving = active[:12] if active else "nothing"
        log.error("staging set %s failed, still serving %s: %s", commit_id[:12], serving, exc)

    def _remember(self, record: SwapRecord) -> None:
        self.history = (self.history + [record])[-100:]

    # --- following a channel ------------------------------------------------------------

    def poll(self) -> bool:
        """Check the channel once; stage and swap when it moved. True when a swap happened."""
        commit = self.resolve()
        active = self.active
        if active is not None and commit == active.id:
            return False
        if (
            self._failed
            and self._failed[0] == commit
            and time.monotonic() - self._failed[1] < self.retry_after
        ):
            return False
        return self.update_to(commit)

    def follow(self) -> None:
        """Start the thread that follows the channel (needs `resolve` and `load_spec`)."""
        if self.resolve is None or self.load_spec is None:
            raise ValueError("following a channel needs resolve and load_spec")
        if self._follower is not None:
            return
        self._stop.clear()
        self._follower = threading.Thread(
            target=self._follow_loop, name="mint-follow", daemon=True
        )
        self._follower.start()

    def _follow_loop(self) -> None:
        while not self._stop.wait(self.poll_interval):
            try:
                self.poll()
            except Exception as exc:  # noqa: BLE001 - a failing resolve must not end the follower
                log.warning("following the channel: %s", exc)

    def stop(self) -> None:
        """Stop following the channel."""
        self._stop.set()
        if self._follower is not None:
            self._follower.join()
            self._follower = None

    def close(self) -> None:
        """Stop following and unload every version; leases still held keep theirs alive."""
        self.stop()
        with self._lock:
            slots = [s for s in (self._active, self._staged) if s is not None]
            self._active = self._staged = None
            for slot in slots:
                slot.retired = True
            idle = [s for s in slots if s.leases == 0]
        for slot in idle:
            slot.engine.close()
