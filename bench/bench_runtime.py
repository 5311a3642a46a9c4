#!/usr/bin/env python
"""The runtime on the demo's tiny MoL: loading, hot swap, routing overhead, requests during swaps.

Figures (issue 4, "Figures to measure"):
  * loading a set's 5 adapters from store blobs (hash-verified, checked on a meta skeleton)
    vs `PeftModel.from_pretrained` + `load_adapter` from plain folders: target <= 1.1x
  * hot swap (stage + swap of a version with a new router) vs restarting on the new version
    in a new process (imports, base and set; uvicorn's start not counted): target >= 10x
    faster. Reloading base and set in process is reported too, as a lower bound.
  * routing overhead: the route stage's share of a whole turn (median over held-out requests)
  * requests failed while 20 versions are swapped in under 3 concurrent clients: target 0

Each pair is measured in one run, alternating which side goes first; medians are reported.

    python bench/bench_runtime.py [--runs 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402
from support import runtime as support  # noqa: E402  (tests/ is on the path now)


def _spec(demo, objects: Path, router: Path):
    """The demo set with `router`, every member's weights in an `objects/ab/cdef…` store."""
    experts = {label: support.stored_adapter(objects, p) for label, p in demo.experts.items()}
    routed = support.stored_adapter(objects, router)
    return support.make_spec(demo, experts=experts, router=routed)


def bench_loading(demo, spec, runs: int) -> dict:
    """load_engine from store blobs vs PeftModel.from_pretrained + load_adapter from folders."""
    from peft import PeftModel

    from mint.examples.tiny import load_base
    from mint.runtime.engine import load_engine
    from mint.runtime.loader import SharedBase

    def ours():
        base = SharedBase.load(demo.base)  # untimed
        return c.timed(lambda: load_engine(base, spec, verify=support.verify_blobs))[0]

    def plain():
        model, _ = load_base(demo.base)  # untimed

        def load():
            peft = PeftModel.from_pretrained(model, demo.router, adapter_name="router")
            for label, folder in demo.experts.items():
                peft.load_adapter(folder, adapter_name=label)

        return c.timed(load)[0]

    mint_s, plain_s = [], []
    for i in range(runs + 1):
        pair = (ours, plain) if i % 2 else (plain, ours)
        first, second = pair[0](), pair[1]()
        if i:  # the first round warms caches
            (mint_s, plain_s)[pair[0] is plain].append(first)
            (mint_s, plain_s)[pair[1] is plain].append(second)
    return {
        "mint_s": c.median(mint_s),
        "plain_s": c.median(plain_s),
        "ratio": c.median(mint_s) / c.median(plain_s),
    }


RESTART = """
import json, sys
from mint.objects import AdapterFiles, SetSpec
from mint.runtime.loader import SharedBase
from mint.runtime.runtime import Runtime
d = json.load(open(sys.argv[1]))
af = lambda x: AdapterFiles(**x)
spec = SetSpec(**{**d, "router": af(d["router"]), "summary": af(d["summary"]),
                  "experts": {k: af(v) for k, v in d["experts"].items()}})
runtime = Runtime(SharedBase.load(sys.argv[2]))
runtime.stage(spec)
runtime.swap()
"""


def bench_swap(demo, specs, runs: int, tmp: Path) -> dict:
    """Stage + swap to a version with another router vs starting again on it.

    Starting again is measured twice: in a new process (what restarting the server costs,
    imports included, without uvicorn's start) and in process (loading the base and the set
    only: a lower bound that no restart can beat).
    """
    import dataclasses
    import json
    import subprocess

    from mint.runtime.engine import load_engine
    from mint.runtime.loader import SharedBase
    from mint.runtime.runtime import Runtime

    runtime = Runtime(SharedBase.load(demo.base), verify=support.verify_blobs)
    runtime.update(specs[0])
    swap_s = [c.timed(lambda i=i: runtime.update(specs[(i + 1) % 2]))[0] for i in range(runs * 2)]
    runtime.close()
    verify = support.verify_blobs
    reload = lambda: load_engine(SharedBase.load(demo.base), specs[1], verify=verify)
    in_process = [c.timed(reload)[0] for _ in range(runs)]
    spec_file = tmp / "spec.json"
    spec_file.write_text(json.dumps(dataclasses.asdict(specs[1])))
    command = [sys.executable, "-c", RESTART, str(spec_file), str(demo.base)]
    process = [
        c.timed(lambda: subprocess.run(command, check=True, capture_output=True))[0]
        for _ in range(runs)
    ]
    swap = c.median(swap_s)
    return {
        "swap_s": swap,
        "restart_s": c.median(process),
        "restart_in_process_s": c.median(in_process),
        "speedup": c.median(process) / swap,
        "speedup_in_process": c.median(in_process) / swap,
    }


def bench_routing(demo, spec, n: int) -> dict:
    """The route stage's share of a turn's latency, over held-out requests."""
    from mint.runtime.batching import BatchPolicy
    from mint.runtime.evaluate import read_records

    runtime = support.serving(demo.base, spec, batching=BatchPolicy.off())  # no window to wait
    turns = [runtime.turn(r["messages"]) for r in list(read_records(demo.heldout_data))[:n]]
    runtime.close()
    shares = [t.latency["route"] / t.latency["total"] for t in turns]
    return {
        "route_ms": 1000 * c.median([t.latency["route"] for t in turns]),
        "turn_ms": 1000 * c.median([t.latency["total"] for t in turns]),
        "route_share": c.median(shares),
        "n": n,
    }


def bench_swaps_under_load(demo, specs, swaps: int = 20) -> dict:
    """Requests sent by 3 clients while `swaps` versions are swapped in; how many failed."""
    import httpx

    from mint.runtime.server import ServerThread

    runtime = support.serving(demo.base, specs[0], verify=support.verify_blobs)
    statuses, stop = [], threading.Event()

    def client(url):
        with httpx.Client(base_url=url, timeout=120) as http:
            while not stop.is_set():
                body = {
                    "model": "macaron",
                    "messages": [{"role": "user", "content": "fix python bug"}],
                }
                try:
                    statuses.append(http.post("/v1/chat/completions", json=body).status_code)
                except httpx.HTTPError:
                    statuses.append(0)

    with ServerThread(runtime) as url:
        threads = [threading.Thread(target=client, args=(url,)) for _ in range(3)]
        for t in threads:
            t.start()
        for i in range(swaps):
            runtime.update(specs[(i + 1) % 2])
            sent = len(statuses)
            while len(statuses) < sent + 3:  # let requests run on this version and across the swap
                time.sleep(0.005)
        stop.set()
        for t in threads:
            t.join()
    runtime.close()
    return {"requests": len(statuses), "failed": sum(s != 200 for s in statuses), "swaps": swaps}


def _ms(seconds: float) -> str:
    return c.fmt_num(seconds * 1000, " ms")


def report(results: dict) -> str:
    load, swap = results["loading"], results["swap"]
    route, load_test = results["routing"], results["under_load"]
    ok = lambda good: "ok" if good else "MISS"
    rows = [
        [
            "load set (5 adapters) vs PeftModel.load_adapter",
            _ms(load["mint_s"]),
            _ms(load["plain_s"]),
            f"{load['ratio']:.2f}x",
            "<= 1.1x",
            c.verdict(load["ratio"], 1.1),
        ],
        [
            "hot swap vs restart (new process)",
            _ms(swap["swap_s"]),
            _ms(swap["restart_s"]),
            f"{swap['speedup']:.0f}x faster",
            ">= 10x",
            ok(swap["speedup"] >= 10),
        ],
        [
            "hot swap vs reload in process (lower bound)",
            _ms(swap["swap_s"]),
            _ms(swap["restart_in_process_s"]),
            f"{swap['speedup_in_process']:.1f}x faster",
            "-",
            "-",
        ],
        [
            "route stage / whole turn",
            c.fmt_num(route["route_ms"], " ms"),
            c.fmt_num(route["turn_ms"], " ms"),
            f"{route['route_share']:.0%}",
            "-",
            "-",
        ],
        [
            f"failed requests during {load_test['swaps']} swaps",
            str(load_test["failed"]),
            f"{load_test['requests']} sent",
            "-",
            "0",
            ok(load_test["failed"] == 0),
        ],
    ]
    header = ["figure", "mint", "baseline", "ratio", "target", ""]
    return c.table("Runtime (tiny demo MoL, CPU)", header, rows)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args(argv)
    import torch

    from mint.examples import train

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="mint-bench-runtime-") as tmp:
        demo = train.build_demo(Path(tmp) / "demo")
        objects = Path(tmp) / "objects"
        specs = [_spec(demo, objects, demo.router), _spec(demo, objects, demo.degraded_router)]
        results = {
            "loading": bench_loading(demo, specs[0], args.runs),
            "swap": bench_swap(demo, specs, args.runs, Path(tmp)),
            "routing": bench_routing(demo, specs[0], 50),
            "under_load": bench_swaps_under_load(demo, specs),
        }
    print(report(results))
    c.write_json("bench_runtime", results)
    return results


if __name__ == "__main__":
    main()
