#!/usr/bin/env python
"""Start-up time of the `mint` command, as a whole process, against importing SQLAlchemy.

    python bench/bench_startup.py [--runs 15]

Measures `mint --help`, `mint --version` and `mint log -n 20` (on a repository of 1,000
commits, SQLite) as new processes, and `python -c "import sqlalchemy"` as the baseline, in
one run, alternating them; reports medians and the ratios. Targets: --help and --version at
most 0.5x the baseline, log at most 1.5x.
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

TARGETS = {"--help": 0.5, "--version": 0.5, "log -n 20": 1.5}


def wall(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
    with c.temp_repo("sqlite", "startup") as (repo, _):
        bench_catalog.populate(repo, 1000)
        argvs = commands(repo.root)
        times: dict[str, list[float]] = {k: [] for k in argvs}
        for argv in argvs.values():  # warm the page cache and the bytecode
            wall(argv)
        for _ in range(runs):
            for name, argv in argvs.items():
                times[name].append(wall(argv))
    base = c.median(times["import sqlalchemy"])
    rows = {
        name: {"median_s": c.median(t), "ratio": c.median(t) / base} for name, t in times.items()
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
                f"{v['median_s'] * 1000:.0f} ms",
                f"{v['ratio']:.2f}x",
                target_text,
                verdict,
            ]
        )
    head = ["command (whole process)", "median", "vs import sqlalchemy", "target", ""]
    return c.table(f"start-up, median of {r['runs']} runs", head, rows)


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
