#!/usr/bin/env python
"""Start-up time of the `mint` command, as a whole process, against importing SQLAlchemy.

    python bench/bench_startup.py [--runs 15]

Measures `mint --help`, `mint --version` and `mint log -n 20` (on a repository of 1,000
commits, SQLite) as new processes, and `python -c "import sqlalchemy"` as the baseline, in
one run, alternating them; reports min / median / max of the wall time and of the CPU time
(user + sys of the child: steadier than wall on a shared machine), the ratios of the medians,
and the load average before and after. Targets: --help and --version at most 0.5x the
baseline, log at most 1.2x (issue 24), in wall time. Every process runs with its bytecode
cached (PYTHONPYCACHEPREFIX in the temporary folder, warmed first), as an installed mint has.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_catalog  # noqa: E402

import _common as c  # noqa: E402

TARGETS = {"--help": 0.5, "--version": 0.5, "log -n 20": 1.2}


def timed(argv: list[str], env: dict) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + sys) of one run of ARGV."""
    r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    return t1 - t0, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


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
        walls: dict[str, list[float]] = {k: [] for k in argvs}
        cpus: dict[str, list[float]] = {k: [] for k in argvs}
        for argv in argvs.values():  # warm the page cache and the bytecode
            timed(argv, env)
        load = [os.getloadavg()[0]]
        for i in range(runs):  # each run in another order
            names = list(argvs)[i % len(argvs) :] + list(argvs)[: i % len(argvs)]
            for name in names:
                w, cpu = timed(argvs[name], env)
                walls[name].append(w)
                cpus[name].append(cpu)
        load.append(os.getloadavg()[0])
    base, base_cpu = c.median(walls["import sqlalchemy"]), c.median(cpus["import sqlalchemy"])
    rows = {
        name: {**spread(t, base), "cpu": spread(cpus[name], base_cpu)} for name, t in walls.items()
    }
    return {
        "runs": runs,
        "baseline_s": base,
        "baseline_cpu_s": base_cpu,
        "load_1min": load,
        "commands": rows,
        "env": c.environment(),
    }


def spread(t: list[float], base: float) -> dict:
    return {"min_s": min(t), "median_s": c.median(t), "max_s": max(t), "ratio": c.median(t) / base}


def report(r: dict) -> str:
    rows = []
    for name, v in r["commands"].items():
        target = TARGETS.get(name)
        verdict = c.verdict(v["ratio"], target) if target else "baseline"
        rows.append(
            [
                f"mint {name}" if target else name,
                ms(v),
                f"{v['ratio']:.2f}x",
                ms(v["cpu"]),
                f"{v['cpu']['ratio']:.2f}x",
                f"<= {target}x" if target else "-",
                verdict,
            ]
        )
    head = ["command (whole process)", "wall ms: min / med / max", "ratio"]
    head += ["CPU ms: min / med / max", "ratio", "target", ""]
    load = " -> ".join(f"{x:.2f}" for x in r["load_1min"])
    title = f"start-up, {r['runs']} runs (ratios of the medians to import sqlalchemy; load {load})"
    return c.table(title, head, rows)


def ms(v: dict) -> str:
    return f"{v['min_s'] * 1000:.0f} / {v['median_s'] * 1000:.0f} / {v['max_s'] * 1000:.0f}"


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
