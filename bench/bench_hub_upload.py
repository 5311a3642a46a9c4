#!/usr/bin/env python
"""The Hub's upload protocol on a registry (issue 37): the unmodified huggingface_hub client's
`upload_folder` of the 80 MB, 7B-shaped adapter (bench_store's) to a real `mint registry serve`,
against one plain streaming PUT of its weights' bytes to the same server
(`PUT /api/v1/blobs/{id}`, bench_registry's baseline): target at most 1.3x. Beside the wall
times, the CPU seconds each side costs the client and the server together (the steadier
figure on a shared machine).

`upload_folder` does everything a trainer's push does: it hashes the files (the client),
asks `preupload`, sends the weights by the LFS batch API (`basic`: one PUT to the registry,
hashed as it arrives, and its `verify`), then the NDJSON commit, which the registry checks as
`mint commit` checks a folder and records. Each run is a new version of the adapter (new
random values), written and synced before either side is timed; the sides alternate which
goes first; both send through one kept-alive connection per client (the Hub client keeps its
own). HF_HUB_DISABLE_XET=1, as documented for uploads to a registry.

    python bench/bench_hub_upload.py [--runs 5] [--db sqlite|postgresql]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_store  # noqa: E402

import _common as c  # noqa: E402
from support.registry import create_token, start_registry  # noqa: E402

TARGET = 1.3


def put_weights(client, folder: Path) -> None:
    """The baseline: the weights' bytes, streamed in one PUT (the blob's id computed first, as
    the Hub client computes its oid)."""
    path = folder / bench_store.WEIGHTS
    with open(path, "rb") as f:
        blob = hashlib.file_digest(f, "sha256").hexdigest()
    with open(path, "rb") as f:
        response = client.put(f"/api/v1/blobs/{blob}", content=f)
    assert response.status_code in (200, 201), response.text


def cpu_seconds(pid: int) -> float:
    """This process's CPU seconds (every thread) plus those of process PID (the server)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return time.process_time() + (int(fields[11]) + int(fields[12])) / ticks


def measured(fn, pid: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of client and server) of FN()."""
    cpu = cpu_seconds(pid)
    wall, _ = c.timed(fn)
    return wall, cpu_seconds(pid) - cpu


def upload(hub, repo_id: str, folder: Path, i: int) -> None:
    info = hub.upload_folder(repo_id=repo_id, folder_path=folder, commit_message=f"v{i}")
    assert info.oid


def run(runs: int, db: str) -> dict:
    os.environ["HF_HUB_DISABLE_XET"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    from huggingface_hub import HfApi

    from mint import api

    tmp = Path(tempfile.mkdtemp(prefix="mint-bench-hub-", dir=os.environ.get("MINT_BENCH_TMP")))
    plain, pushed, plain_cpu, pushed_cpu = [], [], [], []
    load_before = os.getloadavg()
    try:
        with contextlib.ExitStack() as stack:
            url = stack.enter_context(c.pg_database()) if db == "postgresql" else None
            repo, _ = api.init(tmp / "repo", url)
            stack.callback(repo.close)
            base = bench_store.write_base_config(tmp / "base")
            api.base_add(repo, bench_store.BASE_NAME, base)
            token = create_token(repo.root, "bench", "writer")
            server = start_registry(repo.root)
            stack.callback(server.stop)
            hub = HfApi(endpoint=server.url, token=token)
            hub.create_repo("bench/adapter", exist_ok=True)
            client = stack.enter_context(server.client(token))
            warm = tmp / "warm"
            bench_store.write_adapter(warm, seed=0)
            upload(hub, "bench/adapter", warm, 0)
            put_weights(client, warm)
            for i in range(1, runs + 1):
                a, b = tmp / f"plain-{i}", tmp / f"hub-{i}"
                bench_store.write_adapter(a, seed=2 * i)
                bench_store.write_adapter(b, seed=2 * i + 1)
                os.sync()
                sides = [
                    (plain, plain_cpu, lambda: put_weights(client, a)),
                    (pushed, pushed_cpu, lambda: upload(hub, "bench/adapter", b, i)),
                ]
                for out, cpu, fn in sides if i % 2 else reversed(sides):
                    wall, used = measured(fn, server.pid)
                    out.append(wall)
                    cpu.append(used)
                    os.sync()
                shutil.rmtree(a)
                shutil.rmtree(b)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ratio = c.median(pushed) / c.median(plain)
    return {
        "runs": runs,
        "db": db,
        "plain_s": plain,
        "upload_folder_s": pushed,
        "ratio": ratio,
        "plain_cpu_s": plain_cpu,
        "upload_folder_cpu_s": pushed_cpu,
        "cpu_ratio": c.median(pushed_cpu) / c.median(plain_cpu),
        "target": TARGET,
        "load_average": {"before": load_before, "after": os.getloadavg()},
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    args = p.parse_args(argv)
    r = run(args.runs, args.db)

    def ms(xs):
        return f"{min(xs) * 1000:.0f} / {c.median(xs) * 1000:.0f} / {max(xs) * 1000:.0f}"

    print(f"upload_folder of the 80 MB adapter vs one streaming PUT of its weights ({r['db']}):")
    print(f"  PUT            {ms(r['plain_s'])} ms (min / median / max)")
    print(f"  upload_folder  {ms(r['upload_folder_s'])} ms")
    verdict = "meets" if r["ratio"] <= TARGET else "misses"
    print(f"  ratio of medians {r['ratio']:.2f}x ({verdict} the target of {TARGET}x)")
    print(
        f"  CPU seconds, client and server: PUT {ms(r['plain_cpu_s'])} ms, upload_folder "
        f"{ms(r['upload_folder_cpu_s'])} ms, ratio {r['cpu_ratio']:.2f}x"
    )
    print(f"  load average {r['load_average']['before']} -> {r['load_average']['after']}")
    print(json.dumps(r))
    return r


if __name__ == "__main__":
    main()
