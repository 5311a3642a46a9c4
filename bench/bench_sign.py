#!/usr/bin/env python
"""The cost of `mint commit --sign` on an 80 MB, 7B-shaped LoRA adapter (issue 23).

Figures:
  * in-process: `api.commit(..., sign=KEY)` of a new version against `api.commit` of another
    new version, alternating which goes first: target <= 1.10x (the signature lists the blob
    ids the commit computes anyway: nothing is read twice)
  * whole-process: `mint commit --sign KEY` against `mint commit`, as new processes: the same
    <= 1.10x asked of it, in wall time and in CPU time (user + system of the process, which
    other work on a shared machine disturbs less than the wall clock). mint makes and checks
    bundles with cryptography alone: no process imports model_signing (and sigstore)
  * for information: `mint verify REV` (the signature checked against the blob ids), and
    `mint verify --dir CHECKOUT` (every file hashed again, as `model_signing verify` does)
  * at load: `mint serve --require-signed`'s check of the signed commit (`SignatureGuard`,
    in-process) against the runtime's own work to load it without a base (every blob
    re-hashed by the store verifier, the weights read by `read_weights`), alternating

Every version is a new folder, written before the timed part and left past the stat cache's
racy window (bench_store's `versions`), so both sides read warm files and neither is answered
by the stat cache; dirty pages are flushed (untimed) between measurements. min, median and
max over the runs; the ratio is of the medians.

    python bench/bench_sign.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_store as store  # noqa: E402

import _common as c  # noqa: E402


def in_process(repo, tmp: Path, key: Path, runs: int) -> dict:
    """Unsigned and signed commits of new versions, alternating."""
    from mint import api

    out = {"plain": [], "signed": [], "cpu": {"plain": [], "signed": []}}

    def timed(side: str, fn) -> None:
        cpu = time.process_time()  # the process's CPU, its hashing threads' too
        t, r = c.timed(fn)
        out["cpu"][side].append(time.process_time() - cpu)
        assert r.created, r
        out[side].append(t)
        store.sync()

    for i, (a, b) in enumerate(zip(*[iter(store.versions(tmp, "v", 2 * runs, seed=100))] * 2)):

        def plain() -> None:
            timed("plain", lambda: api.commit(repo, "plain", a, f"v{i}", author="b"))

        def signed() -> None:
            timed("signed", lambda: api.commit(repo, "signed", b, f"v{i}", author="b", sign=key))

        for fn in (plain, signed) if i % 2 else (signed, plain):
            fn()
    return out


def with_cpu(run, cpu: dict):
    """RUN, which also keeps the CPU seconds (user + system) of each process in CPU[KEY]."""

    def timed(key: str, *args) -> float:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = run(*args)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        used = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        cpu.setdefault(key, []).append(used)
        return wall

    return timed


def whole_process(repo, tmp: Path, key: Path, runs: int) -> dict:
    """`mint commit` and `mint commit --sign` as new processes, alternating; then verify."""
    cpu: dict[str, list[float]] = {}
    run = with_cpu(c.mint_process(repo.root, tmp), cpu)

    run("warm", "log", "-n", "1")  # warm: bytecode written, page cache
    run("warm", "verify", "signed")
    out = {"plain": [], "signed": [], "verify": [], "verify_dir": [], "cpu": cpu}
    for i, (a, b) in enumerate(zip(*[iter(store.versions(tmp, "w", 2 * runs, seed=900))] * 2)):

        def plain() -> None:
            out["plain"].append(run("plain", "commit", "plain-cli", str(a), "-m", f"w{i}"))
            store.sync()

        def signed() -> None:
            args = ("commit", "signed-cli", str(b), "-m", f"w{i}", "--sign", key)
            out["signed"].append(run("signed", *args))
            store.sync()

        for fn in (plain, signed) if i % 2 else (signed, plain):
            fn()
        out["verify"].append(run("verify", "verify", "signed-cli"))
        dest = tmp / f"co-{i}"
        run("checkout", "checkout", "signed-cli", str(dest))
        out["verify_dir"].append(run("verify_dir", "verify", "--dir", str(dest)))
    return out


def at_load(repo, runs: int) -> dict:
    """--require-signed's check of the signed head against the load's own reading of it."""
    from mint import api
    from mint.runtime.loader import read_weights
    from mint.runtime.service import store_verifier
    from mint.runtime.signatures import SignatureGuard

    guard, verify = SignatureGuard.open(repo, ["bench"]), store_verifier(repo)
    out = {"check": [], "load": []}

    def check() -> None:
        out["check"].append(c.timed(lambda: guard.check("signed"))[0])

    def load() -> None:
        def work() -> None:
            spec = api.set_spec(repo, "signed")
            verify(spec)
            read_weights(spec.router.weights)

        out["load"].append(c.timed(work)[0])

    check(), load()  # warm-up: imports, the page cache
    out["check"].clear(), out["load"].clear()
    for i in range(runs):
        for fn in (check, load) if i % 2 else (load, check):
            fn()
    return out


def run(runs: int) -> dict:
    from mint import api
    from mint.repo import init

    tmp = Path(tempfile.mkdtemp(prefix="mint-bench-sign-", dir=os.environ.get("MINT_BENCH_TMP")))
    try:
        repo, _ = init(tmp / "repo")
        api.base_add(repo, store.BASE_NAME, store.write_base_config(tmp / "base"))
        key = api.key_generate(tmp / "keys")
        api.key_add(repo, "bench", Path(key.public_key).read_text(), by="b")
        size = store.write_adapter(tmp / "warm", seed=0)
        # warm-up: imports (model_signing's too), the first connection
        api.commit(repo, "signed", tmp / "warm", "warm-up", author="b", sign=key.private_key)
        inproc = in_process(repo, tmp, Path(key.private_key), runs)
        loading = at_load(repo, runs)
        whole = whole_process(repo, tmp, Path(key.private_key), runs)
        repo.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = {"adapter_bytes": size, "runs": runs, "in_process": inproc, "whole_process": whole}
    return out | {"at_load": loading}


def spread(values: list[float]) -> list[str]:
    return [f"{min(values):.3f}", f"{c.median(values):.3f}", f"{max(values):.3f}"]


def report(r: dict) -> str:
    rows = []
    for where in ("in_process", "whole_process"):
        m = r[where]
        ratio = c.median(m["signed"]) / c.median(m["plain"])
        rows.append([f"{where}: commit", *spread(m["plain"]), "", ""])
        rows.append([f"{where}: commit --sign", *spread(m["signed"]), f"{ratio:.3f}x"])
        rows[-1].append(c.verdict(ratio, 1.10))
    for where in ("in_process", "whole_process"):
        cpu = r[where]["cpu"]
        ratio = c.median(cpu["signed"]) / c.median(cpu["plain"])
        rows.append([f"{where} cpu: commit", *spread(cpu["plain"]), "", ""])
        rows.append([f"{where} cpu: commit --sign", *spread(cpu["signed"]), f"{ratio:.3f}x"])
        rows[-1].append(c.verdict(ratio, 1.10))
    w = r["whole_process"]
    cpu = w["cpu"]
    rows.append(["mint verify REV", *spread(w["verify"]), "", ""])
    rows.append(["mint verify REV (cpu)", *spread(cpu["verify"]), "", ""])
    rows.append(["mint verify --dir CHECKOUT", *spread(w["verify_dir"]), "", ""])
    rows.append(["mint verify --dir CHECKOUT (cpu)", *spread(cpu["verify_dir"]), "", ""])
    a = r["at_load"]
    ratio = c.median(a["check"]) / c.median(a["load"])
    rows.append(["load: blobs re-hashed + weights read", *spread(a["load"]), "", ""])
    rows.append(["load: --require-signed check", *spread(a["check"]), f"{ratio:.3f}x", ""])
    mb = r["adapter_bytes"] / 1e6
    title = f"Signing: {mb:.1f} MB adapter, seconds over {r['runs']} runs (ratio of medians)"
    header = ["", "min", "median", "max", "ratio", "target <= 1.10x"]
    return c.table(title, header, rows)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    r = run(args.runs)
    r["wall_s"] = time.perf_counter() - t0
    r["environment"] = c.environment()
    print(report(r))
    path = c.write_json("bench_sign", r)
    print(f"\n(results in {path.relative_to(c.REPO_ROOT)}; {r['wall_s']:.0f} s)")
    return r


if __name__ == "__main__":
    main()
