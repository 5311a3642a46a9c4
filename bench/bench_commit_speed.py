#!/usr/bin/env python
"""Where a user waits for a commit (issue 24), each figure beside its baseline in one run.

  * whole-process `mint commit` of a new adapter vs `cp -r` + `sync` (of the copied files) +
    `sha256sum` of the same folder, one shell line: target <= 1.2x, for the 80 MB adapter
    and for a 1 GB one (the same layers at rank 208)
  * the same commit in process (`api.commit`) vs copying each file, fsyncing the copy (mint's
    blobs are durable before a commit names them) and hashing it with hashlib, in the same
    process: target <= 1.1x; the same copy without its fsync is shown beside it (info)
  * the unchanged re-commit of that folder as a whole process, run right after the commit
    that recorded it (the stat cache answers; no file is opened): target <= 0.3 s for 80 MB
  * whole-process `mint log -n 20` (a repository of 1,000 commits) vs
    `python -c "import sqlalchemy"`: target <= 1.2x

Each version is written (numpy, bench_store's 7B-shaped bf16 layout) and synced just before
its pair is timed, as training leaves it: the stat cache must trust it at once, not seconds
later. The sides of a pair alternate which goes first, and dirty pages are flushed (untimed)
between them; each version's folder, copies and blobs are removed once it is measured. The
`mint` processes run with bytecode caching on (PYTHONPYCACHEPREFIX in the temporary folder,
warmed first), as an installed mint has its .pyc files. Every figure is given as min / median
/ max over the runs; ratios are of the medians (the verdict) and, beside them, of the minimums:
the virtual machines these run on are at times slowed by their host, both sides alike (a
1 GB hash's CPU seconds double), and the minimums are the runs it left alone. The machine's
load average is printed with the results: the machines these run on are shared, and on a
loaded one the wall times measure the scheduler as much as mint, so each figure also gives its
CPU seconds (user + system: every thread of this process, or the child process and its
children).

    python bench/bench_commit_speed.py [--runs 5] [--big-runs 5] (--big-runs 0: no 1 GB case)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import struct
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
BIG_R = 208  # bench_store's layers at this rank: 1.04 GB of bf16 weights
SIZES = {"80 MB": bench_store.R, "1 GB": BIG_R}


def spread(xs: list[float]) -> dict:
    return {"min": min(xs), "median": c.median(xs), "max": max(xs), "runs": xs}


def spreads(measured: dict) -> dict:
    return {k: spread(v) for k, v in measured.items() if v}


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


def sides(*names: str) -> dict:
    return {k: [] for name in names for k in (name, f"{name}_cpu")}


def timed_into(out: dict, name: str, measured: tuple) -> object:
    wall, cpu, result = measured
    out[name].append(wall)
    out[f"{name}_cpu"].append(cpu)
    return result


python_env = c.installed_env


def write_adapter(folder: Path, seed: int, r: int) -> int:
    """bench_store's adapter at rank R (R = bench_store.R: the same file): new random bf16
    values (finite: the exponent's top bit cleared), synced. Returns the weights' size."""
    if r == bench_store.R:
        size = bench_store.write_adapter(folder, seed)
        os.sync()
        return size
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    specs = [
        (n, (r, s[1]) if n.endswith("lora_A.weight") else (s[0], r))
        for n, s in sorted(bench_store.tensor_specs())
    ]
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in specs:
        n = 2 * shape[0] * shape[1]
        header[name] = {
            "dtype": "BF16",
            "shape": list(shape),
            "data_offsets": [offset, offset + n],
        }
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(folder / bench_store.WEIGHTS, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, shape in specs:
            bits = rng.integers(0, 1 << 16, size=shape, dtype=np.uint16) & np.uint16(0xBFFF)
            f.write(bits.astype("<u2").tobytes())
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": r,
        "lora_alpha": 2 * r,
        "target_modules": list(bench_store.ATTN + bench_store.MLP),
        "base_model_name_or_path": bench_store.BASE_NAME,
    }
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
    os.sync()
    return (folder / bench_store.WEIGHTS).stat().st_size


def forget(repo, folder: Path, *copies: Path) -> None:
    """Remove a measured version: its folder, the baselines' copies, and mint's blobs of it
    (the repository is thrown away after the run; this keeps the disk from filling)."""
    for f in folder.iterdir():
        with open(f, "rb") as src:
            repo.store.delete(hashlib.file_digest(src, "sha256").hexdigest())
    for path in (folder, *copies):
        shutil.rmtree(path, ignore_errors=True)


def in_process(repo, tmp: Path, runs: int, r: int, seed: int) -> dict:
    """`api.commit` of each new version vs copying, fsyncing and hashing its files in this
    process (and, for information, the same copy without its fsync)."""
    from mint import api

    out = sides("mint", "base", "base_nosync")
    for i in range(runs):
        folder = tmp / f"v-{i}"
        size = write_adapter(folder, seed + i, r)

        def copy_and_hash(target: Path, durable: bool):
            def work() -> None:
                target.mkdir(parents=True, exist_ok=True)
                for f in sorted(folder.iterdir()):
                    shutil.copyfile(f, target / f.name)
                    if durable:
                        fd = os.open(target / f.name, os.O_RDONLY)
                        os.fsync(fd)
                        os.close(fd)
                    with open(f, "rb") as src:
                        hashlib.file_digest(src, "sha256")

            return work

        def baseline() -> None:
            timed_into(out, "base", in_this_process(copy_and_hash(tmp / f"c-{i}", True)))
            os.sync()

        def nosync() -> None:
            timed_into(out, "base_nosync", in_this_process(copy_and_hash(tmp / f"n-{i}", False)))
            os.sync()

        def mint() -> None:
            commit = lambda: api.commit(repo, f"bench-{r}", folder, f"v{i}", author="b")  # noqa: E731
            res = timed_into(out, "mint", in_this_process(commit))
            assert res.created and res.bytes_written > 0, res
            os.sync()

        order = [mint, baseline, nosync]
        for fn in order[i % 3 :] + order[: i % 3]:
            fn()
        forget(repo, folder, tmp / f"c-{i}", tmp / f"n-{i}")
    return out, size


def mint_process(repo_root: Path, tmp: Path):
    """A function running `mint ARGS...` as a new process: (wall, CPU seconds, stdout)."""
    mint = [str(Path(sys.executable).parent / "mint"), "--repo", str(repo_root)]

    def run(*args: str) -> tuple[float, float, str]:
        return process([*mint, *args], python_env(tmp))

    run("--version")
    run("log", "-n", "1")  # bytecode written, page cache warm
    return run


def whole_process(repo, tmp: Path, runs: int, r: int, seed: int) -> dict:
    """`mint commit` of each new version and, right after, its unchanged re-commit, vs
    cp -r + sync + sha256sum of the same folder."""
    run = mint_process(repo.root, tmp)
    out = sides("mint", "base", "recommit")
    for i in range(runs):
        folder = tmp / f"w-{i}"
        write_adapter(folder, seed + i, r)
        dst = tmp / f"cp-{i}"

        def baseline() -> None:
            files = " ".join(f'"{dst / p.name}"' for p in folder.iterdir())
            line = f'cp -r "{folder}" "{dst}" && sync {files} && sha256sum "{folder}"/*'
            timed_into(out, "base", process(line))
            os.sync()

        def mint() -> None:
            timed_into(out, "mint", run("commit", f"cli-{r}", str(folder), "-m", f"w{i}"))
            said = timed_into(out, "recommit", run("commit", f"cli-{r}", str(folder), "-m", "-"))
            assert said.startswith("nothing to commit"), said
            os.sync()

        for fn in (baseline, mint) if i % 2 else (mint, baseline):
            fn()
        forget(repo, folder, dst)
    return out


def log_vs_import(tmp: Path, runs: int) -> dict:
    """`mint log -n 20` on 1,000 commits vs `python -c "import sqlalchemy"`, alternating."""
    out = sides("mint", "base")
    with c.temp_repo("sqlite", "commit-speed-log") as (repo, _):
        bench_catalog.populate(repo, 1000)
        run = mint_process(repo.root, tmp)
        baseline = [sys.executable, "-c", "import sqlalchemy"]
        for i in range(runs):
            base = lambda: timed_into(out, "base", process(baseline, python_env(tmp)))  # noqa: E731
            mint = lambda: timed_into(out, "mint", run("log", "-n", "20", bench_catalog.LINE))  # noqa: E731
            for fn in (base, mint) if i % 2 else (mint, base):
                fn()
    return out


def run(runs: int, big_runs: int) -> dict:
    from mint import api
    from mint.repo import init

    load_before = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="mint-bench-commit-", dir=os.environ.get("MINT_BENCH_TMP")))
    results: dict = {"runs": runs, "big_runs": big_runs, "sizes": {}}
    try:
        repo, _ = init(tmp / "repo")
        api.base_add(repo, bench_store.BASE_NAME, bench_store.write_base_config(tmp / "base"))
        bench_store.write_adapter(tmp / "warm", seed=0)
        api.commit(repo, "warm", tmp / "warm", "warm-up: imports, first connection", author="b")
        for label, r in SIZES.items():
            n = runs if r == bench_store.R else big_runs
            if n < 1:
                continue
            inproc, size = in_process(repo, tmp, n, r, seed=1000 * r)
            whole = whole_process(repo, tmp, n, r, seed=5000 * r)
            results["sizes"][label] = {
                "runs": n,
                "whole": spreads({k: v for k, v in whole.items() if not k.startswith("recommit")}),
                "in_process": spreads(inproc),
                "recommit_s": spread(whole["recommit"]),
                "recommit_cpu_s": spread(whole["recommit_cpu"]),
                "weights_bytes": size,
            }
        repo.close()
        results["log"] = spreads(log_vs_import(tmp, runs))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results["load_average"] = {"before": load_before, "after": os.getloadavg()}
    return results


def _ms(s: dict) -> str:
    return f"{s['min'] * 1000:.0f} / {s['median'] * 1000:.0f} / {s['max'] * 1000:.0f}"


def _pair(r: dict, name: str, base: str, target: float | None) -> list[list[str]]:
    """A figure's row (wall) and its CPU row, its ratio kept in R."""
    mint, ref = r["mint"], r[base]
    ratio = mint["median"] / ref["median"]
    low = mint["min"] / ref["min"]
    cpu_ratio = r["mint_cpu"]["median"] / r[f"{base}_cpu"]["median"]
    r[f"ratio_{base}"], r[f"min_ratio_{base}"], r[f"cpu_ratio_{base}"] = ratio, low, cpu_ratio
    verdict = c.verdict(ratio, target) if target else ""
    goal = f"<= {target}x" if target else "(info)"
    cpu_low = r["mint_cpu"]["min"] / r[f"{base}_cpu"]["min"]
    return [
        [name, _ms(mint), _ms(ref), f"{ratio:.2f}x", f"{low:.2f}x", goal, verdict],
        [
            "  CPU seconds",
            _ms(r["mint_cpu"]),
            _ms(r[f"{base}_cpu"]),
            f"{cpu_ratio:.2f}x",
            f"{cpu_low:.2f}x",
            "",
            "",
        ],
    ]


def report(r: dict) -> str:
    rows = []
    for key, f in r["sizes"].items():
        label = f"{f['weights_bytes'] / 1e6:,.0f} MB"
        rows += _pair(
            f["whole"],
            f"commit {label}, whole process vs cp -r + sync + sha256sum",
            "base",
            TARGETS["whole"],
        )
        rows += _pair(
            f["in_process"],
            f"commit {label}, in process vs copy + fsync + sha256",
            "base",
            TARGETS["in_process"],
        )
        rows += _pair(
            f["in_process"],
            f"commit {label}, in process vs copy + sha256 (no fsync)",
            "base_nosync",
            None,
        )
        rec = f["recommit_s"]
        target = TARGETS["recommit_s"] if key == "80 MB" else None
        rows.append(
            [
                f"unchanged re-commit of {label} right after, whole process",
                _ms(rec),
                "-",
                "-",
                "-",
                f"<= {target * 1000:.0f} ms" if target else "(info)",
                c.verdict(rec["median"], target) if target else "",
            ]
        )
        rows.append(["  CPU seconds", _ms(f["recommit_cpu_s"]), "-", "-", "-", "", ""])
    rows += _pair(
        r["log"], 'mint log -n 20 vs python -c "import sqlalchemy"', "base", TARGETS["log"]
    )
    before, after = r["load_average"]["before"], r["load_average"]["after"]
    runs = f"{r['runs']} runs" + (f" ({r['big_runs']} of 1 GB)" if r["big_runs"] else "")
    title = (
        f"Commit speed, {runs}; ms as min / median / max; load average {before[0]:.1f} "
        f"before, {after[0]:.1f} after ({os.cpu_count()} CPUs)"
    )
    head = ["figure", "mint (ms)", "baseline (ms)", "ratio", "of mins", "target", ""]
    return c.table(title, head, rows)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--big-runs", type=int, default=5, help="runs of the 1 GB adapter (0: none)")
    args = p.parse_args(argv)
    if args.runs < 1 or args.big_runs < 0:
        p.error("--runs must be at least 1, --big-runs at least 0")
    r = run(args.runs, args.big_runs)
    print(report(r))
    path = c.write_json("bench_commit_speed", r)
    print(f"\n(results in {path.relative_to(c.REPO_ROOT)})")
    return r


if __name__ == "__main__":
    main()
