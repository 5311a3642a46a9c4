#!/usr/bin/env python
"""Where a user waits for a commit (issue 24), each figure beside its baseline in one run.

  * whole-process `mint commit` of a new 80 MB adapter vs `cp -r` + `sync` (of the copied
    files) + `sha256sum` of the same folder, one shell line: target <= 1.2x
  * the same commit in process (`api.commit`) vs copying each file and hashing it with
    hashlib, in the same process: target <= 1.1x
  * the unchanged re-commit of that folder as a whole process, run right after the commit
    that recorded it (the stat cache answers; no file is opened): target <= 0.3 s
  * whole-process `mint log -n 20` (a repository of 1,000 commits) vs
    `python -c "import sqlalchemy"`: target <= 1.2x

Each version is written (numpy, bench_store's 7B-shaped bf16 layout) and synced just before
its pair is timed, as training leaves it: the stat cache must trust it at once, not seconds
later. The two sides of a pair alternate which goes first, and dirty pages are flushed
(untimed) between them. The `mint` processes run with bytecode caching on
(PYTHONPYCACHEPREFIX in the temporary folder, warmed first), as an installed mint has its
.pyc files. Every figure is given as min / median / max over the runs; ratios are of the
medians. The machine's load average is printed with the results: the machines these run on
are shared, and on a loaded one the wall times measure the scheduler as much as mint, so each
figure also gives its CPU seconds (user + system: every thread of this process, or the child
process and its children).

    python bench/bench_commit_speed.py [--runs 5]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_catalog  # noqa: E402
import bench_store  # noqa: E402

import _common as c  # noqa: E402

TARGETS = {"whole": 1.2, "in_process": 1.1, "recommit_s": 0.3, "log": 1.2}


def spread(xs: list[float]) -> dict:
    return {"min": min(xs), "median": c.median(xs), "max": max(xs), "runs": xs}


def spreads(measured: dict) -> dict:
    return {k: spread(v) for k, v in measured.items()}


def children_cpu() -> float:
    """CPU seconds (user + system) of the child processes waited for so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def process(argv: list[str] | str, env: dict | None = None) -> tuple[float, float, str]:
    """Run a command (a shell line if a string): (wall seconds, CPU seconds, stdout)."""
    cpu0, t0 = children_cpu(), time.perf_counter()
    proc = subprocess.run(
        argv, shell=isinstance(argv, str), check=True, env=env, capture_output=True, text=True
    )
    return time.perf_counter() - t0, children_cpu() - cpu0, proc.stdout


def in_this_process(fn) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds of every thread of this process, what FN returned)."""
    cpu0, t0 = time.process_time(), time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, time.process_time() - cpu0, result


def pair() -> dict:
    return {k: [] for k in ("mint", "base", "mint_cpu", "base_cpu")}


python_env = c.installed_env


def fresh(folder: Path, seed: int) -> Path:
    """A new version, written and synced now (untimed)."""
    bench_store.write_adapter(folder, seed)
    os.sync()
    return folder


def in_process(repo, tmp: Path, runs: int) -> dict:
    """`api.commit` of each new version vs copying and hashing its files in this process."""
    from mint import api

    out = pair()
    keep = tmp / "copies"  # kept to the end, as mint keeps its blobs
    for i in range(runs):
        folder = fresh(tmp / f"v-{i}", seed=1000 + i)

        def baseline() -> None:
            def work() -> None:
                for f in sorted(folder.iterdir()):
                    target = keep / str(i) / f.name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(f, target)
                    with open(f, "rb") as src:
                        hashlib.file_digest(src, "sha256")

            wall, cpu, _ = in_this_process(work)
            out["base"].append(wall)
            out["base_cpu"].append(cpu)
            os.sync()

        def mint() -> None:
            wall, cpu, res = in_this_process(
                lambda: api.commit(repo, "bench", folder, f"v{i}", author="b")
            )
            assert res.created and res.bytes_written > 0, res
            out["mint"].append(wall)
            out["mint_cpu"].append(cpu)
            os.sync()

        for fn in (baseline, mint) if i % 2 else (mint, baseline):
            fn()
    return out


def mint_process(repo_root: Path, tmp: Path):
    """A function running `mint ARGS...` as a new process: (wall, CPU seconds, stdout)."""
    mint = [str(Path(sys.executable).parent / "mint"), "--repo", str(repo_root)]

    def run(*args: str) -> tuple[float, float, str]:
        return process([*mint, *args], python_env(tmp))

    run("--version")
    run("log", "-n", "1")  # bytecode written, page cache warm
    return run


def whole_process(repo, tmp: Path, runs: int) -> dict:
    """`mint commit` of each new version and, right after, its unchanged re-commit, vs
    cp -r + sync + sha256sum of the same folder."""
    run = mint_process(repo.root, tmp)
    out = {**pair(), "recommit": [], "recommit_cpu": []}
    for i in range(runs):
        folder = fresh(tmp / f"w-{i}", seed=5000 + i)
        dst = tmp / f"cp-{i}"

        def baseline() -> None:
            files = " ".join(f'"{dst / p.name}"' for p in folder.iterdir())
            wall, cpu, _ = process(
                f'cp -r "{folder}" "{dst}" && sync {files} && sha256sum "{folder}"/*'
            )
            out["base"].append(wall)
            out["base_cpu"].append(cpu)
            os.sync()

        def mint() -> None:
            wall, cpu, _ = run("commit", "bench-cli", str(folder), "-m", f"w{i}")
            out["mint"].append(wall)
            out["mint_cpu"].append(cpu)
            wall, cpu, said = run("commit", "bench-cli", str(folder), "-m", "again")
            assert said.startswith("nothing to commit"), said
            out["recommit"].append(wall)
            out["recommit_cpu"].append(cpu)
            os.sync()

        for fn in (baseline, mint) if i % 2 else (mint, baseline):
            fn()
    return out


def log_vs_import(tmp: Path, runs: int) -> dict:
    """`mint log -n 20` on 1,000 commits vs `python -c "import sqlalchemy"`, alternating."""
    out = pair()
    with c.temp_repo("sqlite", "commit-speed-log") as (repo, _):
        bench_catalog.populate(repo, 1000)
        run = mint_process(repo.root, tmp)
        baseline = [sys.executable, "-c", "import sqlalchemy"]
        for i in range(runs):

            def base() -> None:
                wall, cpu, _ = process(baseline, python_env(tmp))
                out["base"].append(wall)
                out["base_cpu"].append(cpu)

            def mint() -> None:
                wall, cpu, _ = run("log", "-n", "20", bench_catalog.LINE)
                out["mint"].append(wall)
                out["mint_cpu"].append(cpu)

            for fn in (base, mint) if i % 2 else (mint, base):
                fn()
    return out


def run(runs: int) -> dict:
    from mint import api
    from mint.repo import init

    load_before = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="mint-bench-commit-", dir=os.environ.get("MINT_BENCH_TMP")))
    try:
        repo, _ = init(tmp / "repo")
        api.base_add(repo, bench_store.BASE_NAME, bench_store.write_base_config(tmp / "base"))
        size = bench_store.write_adapter(tmp / "warm", seed=0)
        api.commit(repo, "warm", tmp / "warm", "warm-up: imports, first connection", author="b")
        inproc = in_process(repo, tmp, runs)
        whole = whole_process(repo, tmp, runs)
        repo.close()
        log = log_vs_import(tmp, runs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "adapter_bytes": size,
        "runs": runs,
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "whole": spreads(whole),
        "in_process": spreads(inproc),
        "recommit_s": spread(whole["recommit"]),
        "recommit_cpu_s": spread(whole["recommit_cpu"]),
        "log": spreads(log),
    }


def _ms(s: dict) -> str:
    return f"{s['min'] * 1000:.0f} / {s['median'] * 1000:.0f} / {s['max'] * 1000:.0f}"


def report(r: dict) -> str:
    rows = []
    names = {
        "whole": "commit 80 MB, whole process vs cp -r + sync + sha256sum",
        "in_process": "commit 80 MB, in process vs copy + sha256 in process",
        "log": 'mint log -n 20 vs python -c "import sqlalchemy"',
    }
    for key, name in names.items():
        mint, base = r[key]["mint"], r[key]["base"]
        ratio = mint["median"] / base["median"]
        r[key]["ratio"] = ratio
        target = TARGETS[key]
        verdict = c.verdict(ratio, target)
        rows.append([name, _ms(mint), _ms(base), f"{ratio:.2f}x", f"<= {target}x", verdict])
        mint, base = r[key]["mint_cpu"], r[key]["base_cpu"]
        cpu_ratio = mint["median"] / base["median"]
        r[key]["cpu_ratio"] = cpu_ratio
        rows.append(["  (info) CPU seconds", _ms(mint), _ms(base), f"{cpu_ratio:.2f}x", "-", ""])
    rec, target = r["recommit_s"], TARGETS["recommit_s"]
    rows.append(
        [
            "unchanged re-commit right after, whole process",
            _ms(rec),
            "-",
            "-",
            f"<= {target * 1000:.0f} ms",
            c.verdict(rec["median"], target),
        ]
    )
    rows.append(["  (info) CPU seconds", _ms(r["recommit_cpu_s"]), "-", "-", "-", ""])
    before, after = r["load_average"]["before"], r["load_average"]["after"]
    title = (
        f"Commit speed: {r['adapter_bytes'] / 1e6:.1f} MB adapter, {r['runs']} runs; "
        f"ms as min / median / max; load average {before[0]:.1f} before, {after[0]:.1f} after "
        f"({os.cpu_count()} CPUs)"
    )
    head = ["figure", "mint (ms)", "baseline (ms)", "ratio", "target", ""]
    return c.table(title, head, rows)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be at least 1")
    r = run(args.runs)
    print(report(r))
    path = c.write_json("bench_commit_speed", r)
    print(f"\n(results in {path.relative_to(c.REPO_ROOT)})")
    return r


if __name__ == "__main__":
    main()
