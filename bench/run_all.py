#!/usr/bin/env python
"""Run every benchmark and print all their tables together (`make bench`).

    python bench/run_all.py [--profile]

Each script also writes its results as JSON under bench/out/.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_catalog  # noqa: E402
import bench_follow  # noqa: E402
import bench_gates  # noqa: E402
import bench_hubproto  # noqa: E402
import bench_long_prompts  # noqa: E402
import bench_pull  # noqa: E402
import bench_runtime  # noqa: E402
import bench_serving  # noqa: E402
import bench_slow_clients  # noqa: E402
import bench_startup  # noqa: E402
import bench_store  # noqa: E402
import bench_vllm  # noqa: E402
import bench_web  # noqa: E402

import _common as c  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--profile", action="store_true", help="also print cProfile output")
    args = p.parse_args(argv)
    extra = ["--profile"] if args.profile else []
    t0 = time.perf_counter()
    print("# bench_store\n", flush=True)
    store = bench_store.main(extra)
    print("\n# bench_catalog\n", flush=True)
    catalog = bench_catalog.main(extra)
    print("\n# bench_gates\n", flush=True)
    gates = bench_gates.main(extra)
    print("\n# bench_web\n", flush=True)
    web = bench_web.main([])
    print("\n# bench_runtime\n", flush=True)
    runtime = bench_runtime.main([])
    print("\n# bench_serving\n", flush=True)
    serving = bench_serving.main([])
    print("\n# bench_long_prompts\n", flush=True)
    long_prompts = bench_long_prompts.main([])
    print("\n# bench_pull\n", flush=True)
    pull = bench_pull.run()
    print("\n# bench_startup\n", flush=True)
    startup = bench_startup.main([])
    print("\n# bench_hubproto\n", flush=True)
    hubproto = bench_hubproto.main([])
    print("\n# bench_follow\n", flush=True)
    follow = bench_follow.main([])
    print("\n# bench_slow_clients\n", flush=True)
    slow_clients = bench_slow_clients.main([])
    print("\n# bench_vllm\n", flush=True)
    vllm = bench_vllm.main([])  # in vLLM's environment; skipped where there is none
    print("\n# Summary\n")
    print(bench_store.report({**store, "profiles": {}}))
    print()
    print(bench_catalog.report(catalog))
    print()
    print(bench_gates.report(gates))
    print()
    print(bench_web.report(web))
    print()
    print(bench_runtime.report(runtime))
    print()
    print(bench_serving.report(serving))
    print()
    print(bench_long_prompts.report(long_prompts))
    print()
    print(bench_startup.report(startup))
    print()
    print(bench_hubproto.report(hubproto))
    print()
    print(bench_follow.report(follow))
    print()
    print(bench_slow_clients.report(slow_clients))
    print()
    print(bench_vllm.report(vllm))
    print(
        f"\npull: mint {pull['mint_median_s']:.2f} s, snapshot_download alone "
        f"{pull['download_median_s']:.2f} s, "
        f"ratio {pull['ratio']:.2f}x (target <= 1.3x)"
    )
    c.write_json(
        "run_all",
        {
            "store": store,
            "catalog": catalog,
            "gates": gates,
            "web": web,
            "runtime": runtime,
            "serving": serving,
            "long_prompts": long_prompts,
            "pull": pull,
            "startup": startup,
            "hubproto": hubproto,
            "follow": follow,
            "slow_clients": slow_clients,
            "vllm": vllm,
        },
    )
    print(f"\n({time.perf_counter() - t0:.0f} s in all; JSON under bench/out/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
