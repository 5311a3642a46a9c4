"""Counters and latency histograms for the runtime, rendered as Prometheus text."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**pairs: str) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in pairs.items())
    return "{" + inner + "}" if inner else ""


class Histogram:
    """A cumulative-bucket histogram, as Prometheus expects."""

    def __init__(self, buckets: tuple[float, ...] = BUCKETS):
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.sum = 0.0
        self.count = 0
        self._max = 0.0

    @property
    def max(self) -> float:
        """The largest value observed (0 when none)."""
        return self._max

    def observe(self, value: float) -> None:
        self._max = max(self._max, value)
        self.sum += value
        self.count += 1
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1

    def lines(self, name: str, **labels: str) -> list[str]:
        out = [
            f"{name}_bucket{_labels(**labels, le=repr(b))} {c}"
            for b, c in zip(self.buckets, self.counts)
        ]
        out.append(f"{name}_bucket{_labels(**labels, le='+Inf')} {self.count}")
        out.append(f"{name}_sum{_labels(**labels)} {self.sum:.6f}")
        out.append(f"{name}_count{_labels(**labels)} {self.count}")
        return out


class Metrics:
    """What `/metrics` reports: requests per route, errors, stage latencies, batch sizes,
    cancelled requests, generated tokens, swaps and resident versions."""

    def __init__(self):
        self._lock = threading.Lock()
        self.requests: dict[str, int] = defaultdict(int)  # route -> answered requests
        self.errors: dict[int, int] = defaultdict(int)  # HTTP status -> refused requests
        self.fallbacks = 0
        self.stages: dict[str, Histogram] = defaultdict(Histogram)
        self.swaps = 0
        self.failed_swaps = 0
        self.signature_refusals: dict[str, int] = defaultdict(int)  # reason -> versions refused
        self.batches = Histogram(BATCH_BUCKETS)
        self.cancelled_requests = 0
        self.completion_tokens = 0
        self.serving: Callable[[], tuple[str, str] | None] = lambda: None  # (set name, commit)
        self.resident: Callable[[], int] = lambda: 0  # versions kept loaded after serving
        self.traces: Callable[[], dict | None] = lambda: None  # the recorder's stats
        self.reports: Callable[[], dict | None] = lambda: None  # the fleet reporter's stats
        # told of each swap, failed staging and change of a canary's split (the fleet reporter)
        self.changed: Callable[[], None] = lambda: None

    def turn(
        self, route: str, latency: dict[str, float], fallback: bool = False, tokens: int = 0
    ) -> None:
        """Count one answered request, its stage latencies (seconds) and tokens generated."""
        with self._lock:
            self.requests[route] += 1
            self.fallbacks += bool(fallback)
            self.completion_tokens += tokens
            for stage, seconds in latency.items():
                self.stages[stage].observe(seconds)

    def error(self, status: int) -> None:
        with self._lock:
            self.errors[status] += 1

    def batch(self, size: int) -> None:
        """Count one batch of `size` requests run together."""
        with self._lock:
            self.batches.observe(size)

    def cancelled(self, tokens: int = 0) -> None:
        """Count one request whose caller went away before it finished, and its tokens."""
        with self._lock:
            self.cancelled_requests += 1
            self.completion_tokens += tokens

    def swapped(self) -> None:
        with self._lock:
            self.swaps += 1

    def swap_failed(self) -> None:
        with self._lock:
            self.failed_swaps += 1

    def signature_refused(self, reason: str) -> None:
        """Count one version refused by `--require-signed` (REASON: a fixed label)."""
        with self._lock:
            self.signature_refusals[reason] += 1

    def render(self) -> str:
        """The Prometheus text exposition of every metric."""
        with self._lock:
            lines = self._counters() + self._histograms()
        serving = self.serving()
        lines += _header("mint_serving_info", "The set commit being served.", "gauge")
        if serving:
            lines.append(f"mint_serving_info{_labels(set=serving[0], commit=serving[1])} 1")
        name, text = "mint_resident_versions", "Set versions kept loaded after they served."
        lines += [*_header(name, text, "gauge"), f"{name} {self.resident()}"]
        lines += _trace_lines(self.traces())
        lines += _report_lines(self.reports())
        return "\n".join(lines) + "\n"

    def _counters(self) -> list[str]:
        name = "mint_requests_total"
        lines = _header(name, "Requests answered, by route.", "counter")
        lines += [f"{name}{_labels(route=r)} {n}" for r, n in sorted(self.requests.items())]
        name = "mint_request_errors_total"
        lines += _header(name, "Requests refused, by HTTP status.", "counter")
        lines += [f"{name}{_labels(status=str(s))} {n}" for s, n in sorted(self.errors.items())]
        name, refusals = "mint_signature_refusals_total", sorted(self.signature_refusals.items())
        lines += _header(name, "Set versions refused as not signed, by reason.", "counter")
        lines += [f"{name}{_labels(reason=r)} {n}" for r, n in refusals]
        for name, value, text in (
            (
                "mint_route_fallbacks_total",
                self.fallbacks,
                "Requests routed to the default label.",
            ),
            ("mint_swaps_total", self.swaps, "Set versions swapped in."),
            (
                "mint_requests_cancelled_total",
                self.cancelled_requests,
                "Requests whose client went away before the end.",
            ),
            (
                "mint_completion_tokens_total",
                self.completion_tokens,
                "Answer tokens generated.",
            ),
            ("mint_swaps_failed_total", self.failed_swaps, "Set versions that failed to stage."),
        ):
            lines += [*_header(name, text, "counter"), f"{name} {value}"]
        return lines

    def _histograms(self) -> list[str]:
        name = "mint_stage_latency_seconds"
        lines = _header(name, "Latency of each stage of a turn.", "histogram")
        for stage, histogram in sorted(self.stages.items()):
            lines += histogram.lines(name, stage=stage)
        name = "mint_batch_size"
        lines += _header(name, "Requests run together in one batch.", "histogram")
        return lines + self.batches.lines(name)


def _trace_lines(stats: dict | None) -> list[str]:
    """The trace recorder's counters (nothing when turns are not traced): rows written,
    dropped (queue full, token refused), failed (still unwritten when the server stopped) and
    invalid (refused alone, after their batch was retried row by row); batches tried again
    later; and what waits (the batch being written included)."""
    if stats is None:
        return []
    name = "mint_traces_total"
    lines = _header(name, "Trace rows, by what became of them.", "counter")
    for outcome in ("written", "dropped", "failed", "invalid"):
        lines.append(f"{name}{_labels(outcome=outcome)} {stats.get(outcome, 0)}")
    retries = "mint_trace_batch_retries_total"
    lines += _header(retries, "Trace batches kept to be tried again later.", "counter")
    lines.append(f"{retries} {stats.get('retries', 0)}")
    for name, key, text in (
        ("mint_traces_pending", "pending", "Trace rows acknowledged, not yet stored."),
        ("mint_traces_in_flight", "in_flight", "Trace rows in the batch being written."),
        ("mint_traces_pending_bytes", "pending_bytes", "Bytes of trace rows waiting."),
    ):
        lines += [*_header(name, text, "gauge"), f"{name} {stats.get(key, 0)}"]
    return lines


def _report_lines(stats: dict | None) -> list[str]:
    """The fleet reporter's counters (nothing when it does not report): reports sent, and
    dropped because they could not go (the registry down, slow or refusing)."""
    if stats is None:
        return []
    name = "mint_fleet_reports_total"
    lines = _header(name, "Reports of what this instance serves, by outcome.", "counter")
    return lines + [f"{name}{_labels(outcome=k)} {stats.get(k, 0)}" for k in ("sent", "dropped")]


def _header(name: str, text: str, kind: str) -> list[str]:
    return [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
