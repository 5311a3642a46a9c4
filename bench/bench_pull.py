#!/usr/bin/env python
"""`mint pull` of an 80 MB, 7B-shaped LoRA adapter from a local hub, against the download alone.

Figure (issue 5, "Figures to measure"): pulling from the local olah server, against
`huggingface_hub.snapshot_download` of the same files alone; the commit step's added cost as
a ratio. Target: at most 1.3x the download alone.

Each run adds a new hub commit (new random bf16 values, so new blobs for mint) and tags it.
Both sides then fetch that revision into their own fresh HF cache, from the same olah, in one
run, alternating which side goes first; dirty pages are flushed (`sync`, untimed) between
them. The mint side is the API call `mint.api.pull` in-process (resolve, list, download,
check, hash, store, record). Figures are medians.

    python bench/bench_pull.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from bench_store import BASE_NAME, WEIGHTS, write_adapter, write_base_config  # noqa: E402

import _common as c  # noqa: E402
from support.hubserver import HubServer  # noqa: E402

REPO_ID = "bench/llama-7b-lora"
PATTERNS = ["adapter_config.json", WEIGHTS, "README.md"]  # what mint fetches of an adapter repo


def run(runs: int = 5) -> dict:
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import disable_progress_bars

    from mint import api

    disable_progress_bars()
    tmp = Path(tempfile.mkdtemp(prefix="mint-bench-pull-", dir=os.environ.get("MINT_BENCH_TMP")))
    server = HubServer(tmp / "hub")
    try:
        git = server.repo(REPO_ID)
        adapter = tmp / "adapter"
        size = write_adapter(adapter, seed=0)
        git.commit({"": adapter, "README.md": "# bench\n"}, "v0")
        git.tag("v0")
        server.start(REPO_ID)
        repo, _ = api.init(tmp / "repo")
        api.base_add(repo, BASE_NAME, write_base_config(tmp / "base"))

        def settings(cache: Path) -> api.HubSettings:
            return api.HubSettings(endpoint=server.endpoint, cache_dir=str(cache), offline=False)

        def pull(rev: str, line: str, cache: Path):
            uri = f"hf://{REPO_ID}@{rev}"
            return api.pull(repo, uri, line=line, settings=settings(cache), by="bench")

        def download(rev: str, cache: Path):
            return snapshot_download(
                REPO_ID,
                revision=rev,
                cache_dir=cache,
                endpoint=server.endpoint,
                allow_patterns=PATTERNS,
                token=False,
            )

        # warm-up, untimed: imports, olah's first answers, the database's first connection
        pull("v0", "warm", tmp / "cache-warm")
        download("v0", tmp / "cache-warm-b")

        mint_s, dl_s = [], []
        for i in range(1, runs + 1):
            shutil.rmtree(adapter)
            write_adapter(adapter, seed=1000 + i)
            git.commit({"": adapter}, f"v{i}")
            git.tag(f"v{i}")
            os.sync()

            def mint_side(rev: str, cache: Path) -> None:
                t, res = c.timed(lambda: pull(rev, "bench", cache))
                item = res.pulled[0]
                assert item.created and item.bytes_written >= size, item
                os.sync()
                mint_s.append(t)

            def download_side(rev: str, cache: Path) -> None:
                t, _ = c.timed(lambda: download(rev, cache))
                os.sync()
                dl_s.append(t)

            sides = [(mint_side, "mint"), (download_side, "dl")]
            for fn, name in sides if i % 2 else sides[::-1]:
                fn(f"v{i}", tmp / f"cache-{name}-{i}")
        repo.close()
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    mint_m, dl_m = c.median(mint_s), c.median(dl_s)
    ratio = mint_m / dl_m
    rows = [
        ["snapshot_download alone", dl_m, "", ""],
        ["mint pull (API, in-process)", mint_m, ratio, f"<= 1.3x {c.verdict(ratio, 1.3)}"],
    ]
    print(
        c.table(
            f"pull of a {size / 1e6:.1f} MB adapter from local olah ({runs} runs, medians, s)",
            ["what", "seconds", "ratio", "target"],
            rows,
        )
    )
    result = {
        "bytes": size,
        "runs": runs,
        "mint_s": mint_s,
        "download_s": dl_s,
        "mint_median_s": mint_m,
        "download_median_s": dl_m,
        "ratio": ratio,
        "target": 1.3,
    }
    c.write_json("bench_pull", result)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    run(args.runs)


if __name__ == "__main__":
    main()
