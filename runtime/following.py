"""Following a channel: the part of `Runtime` that keeps it serving what a channel names.

`follow()` starts a thread that calls `resolve()` every `poll_interval` seconds and, when the
channel names another commit, loads it with `load_spec(commit)`, stages it and swaps it in.
With a `watch`, the thread waits for `nudge()` instead (a registry's event stream calls it when
the channel moves), and checks every `poll_interval` seconds only as a fallback. Each check also
looks at the channel's canary (`canary_of()`) and starts, changes or ends its split.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("mint.runtime")
PROMOTED = "promoted: the candidate holds the channel"  # why a canary ended, in the log


class Watch(Protocol):
    """What tells a follower that its channel may have moved: `run(nudge)` calls `nudge()`
    on each sign of a move until `close()`."""

    def run(self, nudge: Callable[[], None]) -> None: ...

    def close(self) -> None: ...


class Following:
    """`Runtime`'s follower: polls the channel and its canary, on a thread woken by a timer or
    a `Watch`. The runtime gives it `resolve`, `load_spec`, `canary_of`, `watch`,
    `poll_interval`, `retry_after`, the thread's events, and `update_to` and `set_canary`."""

    def poll(self) -> bool:
        """Check the channel once; stage and swap when it moved. True when a swap happened."""
        commit = self.resolve()
        active = self.active
        if active is not None and commit == active.id:
            return False
        if self._recently_failed(commit):
            return False
        split = self._split
        if split is not None and split.canary.candidate == commit:
            self.set_canary(None, why=PROMOTED)  # its version moves to the tier, then serves all
        return self.update_to(commit)

    def poll_canary(self) -> bool:
        """Check the channel's canary once (`canary_of()`); start, change or end the split.
        True when it changed. A candidate that fails to load leaves the holder serving all."""
        if self.canary_of is None:
            return False
        canary, active, split = self.canary_of(), self.active, self._split
        why = "stopped: the channel has no open canary"
        if canary is not None and active is not None and canary.candidate == active.id:
            canary, why = None, PROMOTED  # the holder is the candidate: nothing to split
        if canary is None:
            return self.set_canary(None, why=why)
        if split is not None and split.key == (canary.id, canary.candidate):
            split.canary = canary
            return False
        if self._recently_failed(canary.candidate):
            return False
        return self.set_canary(canary)

    def _recently_failed(self, commit: str) -> bool:
        """COMMIT failed to load less than `retry_after` seconds ago: not tried again yet."""
        f = self._failed
        return bool(f) and f[0] == commit and time.monotonic() - f[1] < self.retry_after

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
        if self.watch is not None:
            self._watcher = threading.Thread(
                target=self.watch.run, args=(self.nudge,), name="mint-watch", daemon=True
            )
            self._watcher.start()

    def nudge(self) -> None:
        """Check the channel now (the follower wakes up)."""
        self._wake.set()

    def _follow_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.poll_interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.poll()
                self.poll_canary()
            except Exception as exc:  # noqa: BLE001 - a failing resolve must not end the follower
                log.warning("following the channel: %s", exc)

    def stop(self) -> None:
        """Stop following the channel."""
        self._stop.set()
        self._wake.set()
        if self.watch is not None:
            self.watch.close()
        if self._watcher is not None:
            self._watcher.join(1.0)  # a daemon: a read blocked until the next heartbeat ends it
            self._watcher = None
        if self._follower is not None:
            self._follower.join()
            self._follower = None
