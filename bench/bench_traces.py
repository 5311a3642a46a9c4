#!/usr/bin/env python
"""What tracing costs the server: throughput with traces recorded vs not (issue 13: <= 5 %).

One runtime follows `macaron@production` in a real SQLite repository (the demo's tiny MoL,
committed) behind the HTTP server; 16 clients send routed requests over every expert. The same
server is measured with its trace recorder on and off, alternating which goes first, and the
throughput is the median over rounds. Every traced turn is checked to be in the database.

    python bench/bench_traces.py [--rounds 4] [--turns 6] [--clients 16]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_serving  # noqa: E402

import _common as c  # noqa: E402


def committed(repo, demo, folder: Path) -> str:
    """The demo committed as set `macaron`, promoted to production; the set's id."""
    from mint import api
    from mint.examples.demo import MOL

    api.base_add(repo, "tiny-llama", demo.base)
    for label, path in demo.experts.items():
        api.commit(repo, label, path, label, author="bench")
        api.tag(repo, "v1", label, by="bench")
    router = api.commit(repo, "router", demo.router, "router", author="bench").id
    folder.mkdir(parents=True)
    for src in (demo.route_prompt, demo.summary_prompt):
        (folder / src.name).write_bytes(src.read_bytes())
    (folder / "mol.toml").write_text(MOL.format(router=router))
    set_id = api.set_commit(repo, folder / "mol.toml", "bench", author="bench").id
    api.promote(repo, set_id, "production", by="bench")
    return set_id


def bench(repo, demo, rounds: int, clients: int, turns: int) -> dict:
    from mint import api
    from mint.runtime.server import ServerThread
    from mint.runtime.service import open_runtime

    requests = bench_serving.client_requests(clients, turns)
    runtime = open_runtime(repo, "macaron@production", str(demo.base))
    recorder = runtime.recorder
    rates: dict[str, list[float]] = {"traced": [], "untraced": []}
    failed = 0
    try:
        with ServerThread(runtime, log_level="error") as url:
            bench_serving._load(url, [bodies[:1] for bodies in requests])  # warm-up
            for r in range(rounds):
                for mode in ("traced", "untraced") if r % 2 else ("untraced", "traced"):
                    runtime.recorder = recorder if mode == "traced" else None
                    seconds, _, bad = bench_serving._load(url, requests)
                    rates[mode].append(clients * turns / seconds)
                    failed += bad
    finally:
        runtime.recorder = recorder
        runtime.close()  # flushes the queue
    stored = len(api.traces_ls(repo, limit=None))
    traced, untraced = c.median(rates["traced"]), c.median(rates["untraced"])
    return {
        "clients": clients,
        "turns_per_round": clients * turns,
        "rounds": rounds,
        "traced_turns_per_s": traced,
        "untraced_turns_per_s": untraced,
        "cost": 1 - traced / untraced,
        "failed": failed,
        "traces_stored": stored,
        "traces_expected": clients + rounds * clients * turns,  # warm-up and traced rounds
        "dropped": recorder.dropped,
        "write_failures": recorder.failed,
    }


def report(r: dict) -> str:
    rows = [
        [
            f"turns/s, {r['clients']} clients, traces on vs off",
            f"{r['traced_turns_per_s']:.1f}",
            f"{r['untraced_turns_per_s']:.1f}",
            f"{100 * r['cost']:.1f} % slower",
            "<= 5 %",
            "ok" if r["cost"] <= 0.05 else "MISS",
        ],
        [
            "traces stored / expected (dropped, failed)",
            str(r["traces_stored"]),
            str(r["traces_expected"]),
            f"{r['dropped']}, {r['write_failures']}",
            "all",
            "ok" if r["traces_stored"] == r["traces_expected"] else "MISS",
        ],
    ]
    header = ["figure", "traced", "untraced", "ratio", "target", ""]
    return c.table("Tracing (tiny demo MoL, CPU, SQLite repository)", header, rows)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--turns", type=int, default=6, help="requests per client per round")
    p.add_argument("--clients", type=int, default=16)
    args = p.parse_args(argv)
    import torch

    from mint import api
    from mint.examples import train

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="mint-bench-traces-") as tmp:
        demo = train.build_demo(Path(tmp) / "demo")
        repo, _ = api.init(Path(tmp) / "repo")
        try:
            committed(repo, demo, Path(tmp) / "set")
            results = bench(repo, demo, args.rounds, args.clients, args.turns)
        finally:
            repo.close()
    print(report(results))
    c.write_json("bench_traces", results)
    return results


if __name__ == "__main__":
    main()
