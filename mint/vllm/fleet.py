"""What the plugin serves, reported to the repository or registry it reads (issue 38); no vLLM.

The plugin follows the names that move (`chat@production`). For each it reports the commit it
serves (what the next request for the name gets) and since when, and its last failure to
stage a new one. When a followed name moves, `staged` fetches and verifies the new commit at
once (as the next request would): a refusal (a signature required and missing, another base,
bytes that do not verify) is reported with its reason and the old version keeps serving; the
resolver retires vLLM's entry for the name only once the new version is ready.

Settings, from vLLM's environment: MINT_INSTANCE (default: this machine's name and vLLM's
`--port`), MINT_REPORT_INTERVAL (seconds, default 10), MINT_REPORT=0 to report nothing.
"""

from __future__ import annotations

import atexit
import logging
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence

from mint import __version__, api
from mint.errors import MintError
from mint.fleet.report import one_line
from mint.fleet.reporter import INTERVAL, Reporter, when
from mint.store.errors import StoreError
from mint.vllm.adapters import AdapterSource

log = logging.getLogger("vllm.plugins.mint")
ENGINE = "vllm-plugin"
RETRY_AFTER = 10.0  # seconds before a refused version is fetched again
OFF = ("0", "false", "no", "off")


def default_instance(argv: Sequence[str] = sys.argv) -> str:
    """This machine's name and the port vLLM listens on (its `--port`, default 8000)."""
    port = "8000"
    for i, arg in enumerate(argv):
        if arg == "--port" and i + 1 < len(argv):
            port = argv[i + 1]
        elif arg.startswith("--port="):
            port = arg.split("=", 1)[1]
    return f"{socket.gethostname()}:{port}"


class PluginFleet:
    """The names the plugin follows and what it serves for each, reported by a `Reporter`."""

    def __init__(self, source: AdapterSource, env: Mapping[str, str]):
        self.source = source
        self.instance = env.get("MINT_INSTANCE") or default_instance()
        self.interval = float(env.get("MINT_REPORT_INTERVAL") or INTERVAL)
        self.enabled = (env.get("MINT_REPORT") or "1").strip().lower() not in OFF
        self.started_at = when(time.time())
        self._names: dict[str, dict] = {}  # asked -> commit, since, failure, base
        self._refused: dict[tuple[str, str], float] = {}  # (asked, commit) -> when
        self._lock = threading.Lock()
        self.reporter = Reporter(self._send, self.snapshot, interval=self.interval)
        self._started = False

    def _send(self, report: dict) -> None:
        api.fleet_report(self.source.repo, report, by=self.instance)

    def serving(self, asked: str, commit: str, base: str) -> None:
        """ASKED (a name that moves) is served from COMMIT from now on (if not already)."""
        with self._lock:
            entry = self._names.setdefault(asked, {"commit": None, "failure": None})
            if entry["commit"] != commit:
                entry.update(commit=commit, since=when(time.time()), failure=None)
            entry["base"] = base
        self._changed()

    def failed(self, asked: str, commit: str, exc: BaseException) -> None:
        """Staging COMMIT for ASKED failed with EXC; what it served before serves on."""
        with self._lock:
            entry = self._names.setdefault(asked, {"commit": None, "since": None})
            reason = one_line(str(exc))[:500] or type(exc).__name__
            at = when(time.time())
            entry["failure"] = {"commit": commit, "at": at, "kind": type(exc).__name__}
            entry["failure"]["reason"] = reason
            self._refused[(asked, commit)] = time.monotonic()
        log.warning("%s: %s is refused, %s", asked, commit[:12], reason)
        self._changed()

    def staged(self, asked: str, new: str) -> bool:
        """ASKED moved to NEW: fetch and verify it now (as the next request would). False
        when it is refused (reported; the old version serves on) or was refused less than
        RETRY_AFTER seconds ago."""
        with self._lock:
            base = (self._names.get(asked) or {}).get("base")
            refused = self._refused.get((asked, new))
        if refused is not None and time.monotonic() - refused < RETRY_AFTER:
            return False
        if base is None:
            return True  # never served here: nothing to keep serving
        try:
            resolved = self.source.fetch(base, asked)
        except (MintError, StoreError) as exc:
            self.failed(asked, new, exc)
            return False
        self.serving(asked, resolved.commit, base)
        return True

    def snapshot(self) -> dict:
        with self._lock:
            names = [
                {"name": asked, "commit": e.get("commit"), "since": e.get("since")}
                | ({"failure": e["failure"]} if e.get("failure") else {})
                for asked, e in sorted(self._names.items())
            ]
            base = next((e["base"] for e in self._names.values() if e.get("base")), None)
        return {
            "instance": self.instance,
            "engine": ENGINE,
            "base": self.source.fingerprint(base) if base else None,
            "version": __version__,
            "interval": self.interval,
            "started_at": self.started_at,
            "names": names,
        }

    def _changed(self) -> None:
        if not self.enabled:
            return
        with self._lock:
            start, self._started = not self._started, True
        if start:  # on first use: vLLM loads the plugin in processes that never resolve
            self.reporter.start()
            atexit.register(self.close)
        self.reporter.changed()

    def close(self) -> None:
        """Stop reporting, with a goodbye (vLLM stops); once."""
        with self._lock:
            started, self._started, self.enabled = self._started, False, False
        if started:
            atexit.unregister(self.close)
            self.reporter.close(goodbye=True)
