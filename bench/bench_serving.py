#!/usr/bin/env python
"""Serving on the demo's tiny MoL: batches across adapters, and rollbacks from the CPU tier.

Figures (issue 12):
  * throughput (completed turns/s) of 16 concurrent clients whose requests are routed to every
    expert, against the same server with batching off (`--no-batching`): target >= 3x.
    p50 and p95 latency of a turn for both, as a client sees it (HTTP included).
  * rollback time: serving again a version still resident in the CPU tier (a swap of
    pointers) vs one that must be loaded again (its blobs verified, its router read).

Both sides of each figure are measured in one run, alternating which goes first; throughput is
the median over rounds, latencies are pooled over them.

    python bench/bench_serving.py [--rounds 2] [--turns 6] [--clients 16]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402
from support import runtime as support  # noqa: E402  (tests/ is on the path now)


def _spec(demo, objects: Path, router: Path):
    """The demo set with `router`, every member's weights in an `objects/ab/cdef…` store."""
    experts = {label: support.stored_adapter(objects, p) for label, p in demo.experts.items()}
    routed = support.stored_adapter(objects, router)
    return support.make_spec(demo, experts=experts, router=routed)


def client_requests(clients: int, turns: int) -> list[list[dict]]:
    """`turns` routed requests per client, their topics spread over every expert."""
    import random

    from mint.examples import train

    rng, labels = random.Random(0), train.LABELS
    texts = [
        [train.synthetic_request(labels[(client + i) % len(labels)], rng) for i in range(turns)]
        for client in range(clients)
    ]
    return [
        [{"model": "macaron", "messages": [{"role": "user", "content": t}]} for t in row]
        for row in texts
    ]


def _load(url: str, requests: list[list[dict]]) -> tuple[float, list[float], int]:
    """Every client sends its requests one after the other, all clients at once (seconds for
    all, latency of each turn, failed requests)."""
    return c.chat_load(url, requests)[:3]


def _serve_and_load(demo, spec, policy, requests) -> tuple[float, list[float], int, float]:
    """One server with `policy`, warmed up, under the clients' load. Also the mean batch."""
    from mint.runtime.server import ServerThread

    runtime = support.serving(demo.base, spec, batching=policy)
    try:
        with ServerThread(runtime, log_level="error") as url:
            _load(url, [bodies[:1] for bodies in requests])  # warm-up, not counted
            before = runtime.metrics.batches.count, runtime.metrics.batches.sum
            seconds, latencies, failed = _load(url, requests)
            count = runtime.metrics.batches.count - before[0]
            mean_batch = (runtime.metrics.batches.sum - before[1]) / max(count, 1)
    finally:
        runtime.close()
    return seconds, latencies, failed, mean_batch


def bench_throughput(demo, spec, rounds: int, clients: int, turns: int) -> dict:
    """Turns per second and latency percentiles, batching on vs off, alternating."""
    from mint.runtime.batching import BatchPolicy

    requests = client_requests(clients, turns)
    modes = {"batched": BatchPolicy(window=0.005, max_batch=16), "sequential": BatchPolicy.off()}
    rates: dict[str, list[float]] = {m: [] for m in modes}
    latencies: dict[str, list[float]] = {m: [] for m in modes}
    failed, batches = 0, []
    for r in range(rounds):
        order = list(modes) if r % 2 else list(reversed(modes))
        for mode in order:
            seconds, lat, bad, mean_batch = _serve_and_load(demo, spec, modes[mode], requests)
            rates[mode].append(clients * turns / seconds)
            latencies[mode] += lat
            failed += bad
            if mode == "batched":
                batches.append(mean_batch)
    out = {"clients": clients, "turns": clients * turns, "rounds": rounds, "failed": failed}
    for mode in modes:
        out[mode] = {
            "turns_per_s": c.median(rates[mode]),
            "p50_s": _percentile(latencies[mode], 50),
            "p95_s": _percentile(latencies[mode], 95),
        }
    out["mean_batch"] = c.median(batches)
    out["speedup"] = out["batched"]["turns_per_s"] / out["sequential"]["turns_per_s"]
    return out


def _percentile(values: list[float], p: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def bench_rollback(demo, specs, runs: int) -> dict:
    """Serving a previous version again: from the CPU tier vs loading it again."""
    from mint.runtime.loader import SharedBase
    from mint.runtime.runtime import Runtime

    good, degraded = specs
    timings: dict[str, list[float]] = {"resident": [], "load": []}
    runtimes = {
        tier: Runtime(
            SharedBase.load(demo.base), verify=support.verify_blobs, max_cpu_adapters=size
        )
        for tier, size in (("resident", 64), ("load", 0))
    }
    for runtime in runtimes.values():
        runtime.update(good)
    for i in range(runs + 1):
        order = list(runtimes) if i % 2 else list(reversed(runtimes))
        for tier in order:
            runtime = runtimes[tier]
            runtime.update(degraded)
            seconds = c.timed(lambda r=runtime: r.update(good))[0]
            if i:  # the first round warms caches
                timings[tier].append(seconds)
            assert runtime.history[-1].resident == (tier == "resident")
    for runtime in runtimes.values():
        runtime.close()
    resident, load = c.median(timings["resident"]), c.median(timings["load"])
    return {"resident_s": resident, "load_s": load, "speedup": load / resident, "runs": runs}


def _ms(seconds: float) -> str:
    return c.fmt_num(seconds * 1000, " ms")


def report(results: dict) -> str:
    t, rb = results["throughput"], results["rollback"]
    on, off = t["batched"], t["sequential"]
    rows = [
        [
            f"turns/s, {t['clients']} clients over all experts",
            f"{on['turns_per_s']:.1f}",
            f"{off['turns_per_s']:.1f}",
            f"{t['speedup']:.1f}x",
            ">= 3x",
            "ok" if t["speedup"] >= 3 else "MISS",
        ],
        ["p50 latency of a turn", _ms(on["p50_s"]), _ms(off["p50_s"]), "-", "-", "-"],
        ["p95 latency of a turn", _ms(on["p95_s"]), _ms(off["p95_s"]), "-", "-", "-"],
        [
            "mean batch (batched) / failed requests",
            f"{t['mean_batch']:.1f}",
            str(t["failed"]),
            "-",
            "0 failed",
            "ok" if t["failed"] == 0 else "MISS",
        ],
        [
            "rollback: resident version vs loaded again",
            _ms(rb["resident_s"]),
            _ms(rb["load_s"]),
            f"{rb['speedup']:.0f}x faster",
            "-",
            "-",
        ],
    ]
    header = ["figure", "mint", "baseline", "ratio", "target", ""]
    return c.table("Serving (tiny demo MoL, CPU): batched vs --no-batching", header, rows)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--turns", type=int, default=6, help="requests per client per round")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--runs", type=int, default=7, help="rollbacks timed per side")
    args = p.parse_args(argv)
    import torch

    from mint.examples import train

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="mint-bench-serving-") as tmp:
        demo = train.build_demo(Path(tmp) / "demo")
        objects = Path(tmp) / "objects"
        specs = [_spec(demo, objects, demo.router), _spec(demo, objects, demo.degraded_router)]
        results = {
            "throughput": bench_throughput(demo, specs[0], args.rounds, args.clients, args.turns),
            "rollback": bench_rollback(demo, specs, args.runs),
        }
    print(report(results))
    c.write_json("bench_serving", results)
    return results


if __name__ == "__main__":
    main()
