#!/usr/bin/env python
"""The registry's Hub download protocol: `huggingface_hub.snapshot_download` of an 80 MB adapter
against a plain GET of the same bytes from the same server.

Figure (issue 11): `snapshot_download(LINE, revision="production")` with HF_ENDPOINT at a real
`mint registry serve` (model info, a HEAD per file, the GETs, the HF cache's blobs and links)
against one httpx GET of the weights' resolve URL streamed to a file (redirects followed, as
the Hub client does). Once with the registry's local store, once with S3 (moto_server on
127.0.0.1), where the registry answers large files with a 302 to a presigned URL and the bytes
come from S3. Target: at most 1.2x. Runs alternate which side goes first; dirty pages are
flushed (untimed) between them; figures are medians.

    python bench/bench_hubproto.py [--runs 5]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from bench_store import BASE_NAME, WEIGHTS, write_adapter, write_base_config  # noqa: E402

import _common as c  # noqa: E402
from support.registry import create_token, running_registry  # noqa: E402

TARGET = 1.2
LINE = "bench/adapter"


@contextlib.contextmanager
def registry_over(store: str, tmp: Path):
    """A repository (local store, or a fresh bucket on a moto server) with LINE's 80 MB
    adapter at `production`, behind a registry. Yields (registry, token, weights path)."""
    from mint import api

    from support.s3server import MotoServer

    moto = MotoServer() if store == "s3" else None
    saved = dict(os.environ)
    try:
        url = None
        if moto is not None:
            os.environ.update(moto.env)  # for this process and the registry it starts
            url = f"s3://{moto.new_bucket()}/blobs"
        repo, _ = api.init(tmp / f"repo-{store}", store=url)
        api.base_add(repo, BASE_NAME, write_base_config(tmp / "base"))
        adapter = tmp / f"adapter-{store}"
        write_adapter(adapter, seed=1 if moto else 0)
        cid = api.commit(repo, LINE, adapter, "80 MB", author="bench").id
        api.promote(repo, cid, "production", by="bench")
        token = create_token(repo.root, "rita", "reader")
        with running_registry(repo.root) as registry:
            yield registry, token, adapter / WEIGHTS
        repo.close()
    finally:
        os.environ.clear()
        os.environ.update(saved)
        if moto is not None:
            moto.stop()


def plain_get(url: str, token: str, dest: Path) -> int:
    """One GET streamed to DEST, redirects followed (the token stays on the first host)."""
    import httpx

    size = 0
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.stream("GET", url, headers=headers, follow_redirects=True, timeout=300) as r:
        r.raise_for_status()
        with open(dest, "wb") as out:
            for chunk in r.iter_bytes(1 << 20):
                out.write(chunk)
                size += len(chunk)
    return size


def measure(store: str, runs: int, tmp: Path) -> dict:
    import httpx
    from huggingface_hub import snapshot_download

    with registry_over(store, tmp) as (registry, token, weights):
        size = weights.stat().st_size
        url = f"{registry.url}/{LINE}/resolve/production/{WEIGHTS}"
        first = httpx.get(url, headers={"Authorization": f"Bearer {token}"})
        redirected = first.status_code == 302

        def snap(n: int) -> None:
            folder = snapshot_download(
                LINE,
                revision="production",
                endpoint=registry.url,
                token=token,
                cache_dir=tmp / f"hf-{store}-{n}",
            )
            assert (Path(folder) / WEIGHTS).stat().st_size == size

        def get(n: int) -> None:
            assert plain_get(url, token, tmp / f"get-{store}-{n}") == size

        snaps, gets = [], []
        for n in range(runs + 1):  # the first round warms both up and is not counted
            order = [(snap, snaps), (get, gets)] if n % 2 else [(get, gets), (snap, snaps)]
            for fn, out in order:
                os.sync()
                t0 = time.perf_counter()
                fn(n)
                if n:
                    out.append(time.perf_counter() - t0)
            for p in tmp.glob(f"*-{store}-{n}"):
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink()
    s, g = c.median(snaps), c.median(gets)
    return {
        "store": store,
        "bytes": size,
        "redirected": redirected,
        "snapshot_download_s": s,
        "plain_get_s": g,
        "ratio": s / g,
        "snapshot_runs_s": snaps,
        "get_runs_s": gets,
    }


def run(runs: int = 5) -> dict:
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    tmp = Path(tempfile.mkdtemp(prefix="mint-bench-hub-", dir=os.environ.get("MINT_BENCH_TMP")))
    try:
        results = [measure(store, runs, tmp) for store in ("local", "s3")]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"target": TARGET, "results": results}


def report(r: dict) -> str:
    rows = [
        [
            x["store"] + (" (302 to S3)" if x["redirected"] else ""),
            x["snapshot_download_s"],
            x["plain_get_s"],
            f"{x['ratio']:.2f}x",
            c.verdict(x["ratio"], TARGET),
        ]
        for x in r["results"]
    ]
    mb = r["results"][0]["bytes"] / 1e6
    header = ["store", "snapshot_download s", "plain GET s", "ratio", f"<= {TARGET}x"]
    return c.table(f"Hub protocol: {mb:.0f} MB adapter from a registry", header, rows)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args(argv)
    r = run(args.runs)
    print(report(r))
    c.write_json("bench_hubproto", r)
    return r


if __name__ == "__main__":
    main()
