#!/usr/bin/env python
"""Start-up time of the `mint` command, as a whole process, against importing SQLAlchemy.

    python bench/bench_startup.py [--runs 15]

Measures `mint --help`, `mint --version` and `mint log -n 20` (on a repository of 1,000
commits, SQLite) as new processes, and `python -c "import sqlalchemy"` as the baseline, in
one run, alternating them; reports medians and the ratios. Targets: --help and --version at
most 0.5x the baseline, log at most 1.2x (issue 24). Every process runs with its bytecode
cached (PYTHONPYCACHEPREFIX in the temporary folder, warmed first), as an installed mint has.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_catalog  # noqa: E402

import _common as c  # noqa: E402

TARGETS = {"--help": 0.5, "--version": 0.5, "log -n 20": 1.2}


def wall(argv: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def commands(repo_root: Path) -> dict[str, list[str]]:
    mint = [sys.executable, "-m", "mint"]
    return {
        "import sqlalchemy": [sys.executable, "-c", "import sqlalchemy"],
        "--help": [*mint, "--help"],
        "--version": [*mint, "--version"],
        "log -n 20": [*mint, "--repo", str(repo_root), "log", "-n", "20", bench_catalog.LINE],
    }


def run(runs: int) -> dict:
    with c.temp_repo("sqlite", "startup") as (repo, tmp):
        bench_catalog.populate(repo, 1000)
        argvs, env = commands(repo.root), c.installed_env(tmp)
        times: dict[str, list[float]] = {k: [] for k in argvs}
        for argv in argvs.values():  # warm the page cache and the bytecode
            wall(argv, env)
        for i in range(runs):  # each run in another order
            names = list(argvs)[i % len(argvs) :] + list(argvs)[: i % len(argvs)]
            for name in names:
                times[name].append(wall(argvs[name], env))
    base = c.median(times["import sqlalchemy"])
    rows = {
        name: {
            "min_s": min(t),
            "median_s": c.median(t),
            "max_s": max(t),
            "ratio": c.median(t) / base,
        }
        for name, t in times.items()
    }
    return {"runs": runs, "baseline_s": base, "commands": rows, "env": c.environment()}


def report(r: dict) -> str:
    rows = []
    for name, v in r["commands"].items():
        target = TARGETS.get(name)
        verdict = c.verdict(v["ratio"], target) if target else "baseline"
        target_text = f"<= {target}x" if target else "-"
        rows.append(
            [
                f"mint {name}" if target else name,
                f"{v['min_s'] * 1000:.0f} / {v['median_s'] * 1000:.0f} / {v['max_s'] * 1000:.0f}",
                f"{v['ratio']:.2f}x",
                target_text,
                verdict,
            ]
        )
    head = [
        "command (whole process)",
        "ms: min / median / max",
        "vs import sqlalchemy",
        "target",
        "",
    ]
    return c.table(f"start-up, {r['runs']} runs (ratios of the medians)", head, rows)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=15)
    args = p.parse_args(argv)
    r = run(args.runs)
    print(report(r))
    c.write_json("startup", r)
    return r


if __name__ == "__main__":
    main()
