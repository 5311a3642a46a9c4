#!/usr/bin/env python
"""The registry's Hub download protocol: `huggingface_hub.snapshot_download` against a plain GET
of the same bytes from the same server, for an 80 MB adapter, a 1 GB set and small files.

Figures (issue 11, issue 24), each side by side in one run, min/median/max over the runs:
  * 80 MB: `snapshot_download(LINE, revision="production")` with HF_ENDPOINT at a real
    `mint registry serve` (model info, the tree, a HEAD and a GET per file, the HF cache's
    blobs and links) against one httpx GET of the weights' resolve URL streamed to a file
    (redirects followed, as the Hub client does). Once with the registry's local store, once
    with S3 (moto_server on 127.0.0.1), where large files are a 302 to a presigned URL.
    Target: at most 1.2x.
  * 1 GB: `snapshot_download` of a set line whose four members' weights total 1 GB (its
    checkout: mol.toml, two prompts, four member folders) against one GET of a 1 GB blob (a
    line whose weights are 1 GB), local store; and `snapshot_download` of that 1 GB line.
    Target: at most 1.1x.
  * the client's fixed cost per file: `snapshot_download` of a line of 34 small files against
    34 GETs of them on one connection, and `hf_hub_download` of one small file against one GET.
  * the first download of the 1 GB blob by a fresh server process, which hashes it once
    before sending it (later downloads are sent by sendfile, unhashed: mint.registry.blob_send).

Runs alternate which side goes first; dirty pages are flushed (untimed) between them; the
first round warms up and is not counted. Everything lives in a temporary folder removed at
the end (MINT_BENCH_TMP chooses where; the 1 GB part needs about 5 GB of disk).

    python bench/bench_hubproto.py [--runs 5] [--no-large]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from bench_store import (  # noqa: E402
    ATTN,
    BASE_NAME,
    LAYERS,
    MLP,
    WEIGHTS,
    module_shapes,
    write_adapter_config,
    write_base_config,
)

import _common as c  # noqa: E402
from support.registry import create_token, running_registry  # noqa: E402

TARGET = 1.2  # 80 MB (issue 11)
TARGET_LARGE = 1.1  # 1 GB (issue 24)
LINE, BIG, SET, SMALL = "bench/adapter", "bench/big", "bench/set", "bench/small"
MEMBERS = ("router", "a", "b", "summary")  # the set's four member lines, bench/NAME
SMALL_FILES = 32  # beside the small line's config and weights
MOL = """name = "bench/set"
protocol = "mol/1"
base = "%s"
[router]
adapter = "bench/router@production"
labels = ["a", "b"]
prompt = "route.md"
[experts]
a = "bench/a@production"
b = "bench/b@production"
[summary]
adapter = "bench/summary@production"
prompt = "summary.md"
"""


def write_lora(folder: Path, r: int, seed: int, layers: int = LAYERS) -> int:
    """A PEFT adapter of the 7B shape at rank R (r=16: 80 MB, r=200: 1 GB), random bf16
    values, written in pieces (no torch). Returns the weights file's size."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    shapes, specs = module_shapes(), []
    for i in range(layers):
        for mod in ATTN + MLP:
            prefix = f"base_model.model.model.layers.{i}.{'self_attn' if mod in ATTN else 'mlp'}"
            fan_in, fan_out = shapes[mod]
            specs += [(f"{prefix}.{mod}.lora_A.weight", (r, fan_in))]
            specs += [(f"{prefix}.{mod}.lora_B.weight", (fan_out, r))]
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, (rows, cols) in sorted(specs):
        n = rows * cols * 2
        span = [offset, offset + n]
        header[name] = {"dtype": "BF16", "shape": [rows, cols], "data_offsets": span}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    rng = np.random.default_rng(seed)
    with open(folder / WEIGHTS, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        left = offset // 2
        while left:
            n = min(left, 32 << 20)
            values = rng.standard_normal(n, dtype=np.float32) * np.float32(0.02)
            f.write((values.view(np.uint32) >> 16).astype("<u2").tobytes())
            left -= n
    write_adapter_config(folder, r)
    return (folder / WEIGHTS).stat().st_size


def _commit(repo, line: str, folder: Path) -> int:
    from mint import api

    cid = api.commit(repo, line, folder, line, author="bench").id
    api.promote(repo, cid, "production", by="bench")
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    shutil.rmtree(folder)  # the store has it: disk is kept for the downloads
    return size


@contextlib.contextmanager
def registry_over(store: str, tmp: Path, large: bool):
    """A repository (local store, or a fresh bucket on a moto server) with LINE's 80 MB
    adapter at `production` (and, on the local store, the small line and, when LARGE, the
    1 GB line and the 1 GB set), behind a registry. Yields (registry, token, sizes)."""
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
        src = tmp / "src"
        sizes = {LINE: (write_lora(src, 16, seed=1 if moto else 0), _commit(repo, LINE, src))[0]}
        if moto is None:
            write_lora(src, 1, seed=3, layers=1)
            (src / "docs").mkdir()
            for i in range(SMALL_FILES):
                (src / "docs" / f"note{i:02d}.md").write_text(f"note {i}\n" * 100)
            sizes[SMALL] = _commit(repo, SMALL, src)
        if moto is None and large:
            sizes[BIG] = (write_lora(src, 200, seed=4), _commit(repo, BIG, src))[0]
            sizes[SET] = 0
            for i, member in enumerate(MEMBERS):
                sizes[SET] += write_lora(src, 50, seed=10 + i)
                _commit(repo, f"bench/{member}", src)
            (tmp / "set").mkdir()
            (tmp / "set" / "route.md").write_text("Route the request.\n")
            (tmp / "set" / "summary.md").write_text("Summarise.\n")
            (tmp / "set" / "mol.toml").write_text(MOL % BASE_NAME)
            sid = api.set_commit(repo, tmp / "set" / "mol.toml", "1 GB", author="bench").id
            api.promote(repo, sid, "production", by="bench")
        token = create_token(repo.root, "rita", "reader")
        with running_registry(repo.root) as registry:
            yield registry, token, sizes
        repo.close()
    finally:
        os.environ.clear()
        os.environ.update(saved)
        if moto is not None:
            moto.stop()


def plain_get(url: str, token: str, dest: Path, client=None) -> int:
    """One GET streamed to DEST, redirects followed (the token stays on the first host)."""
    import httpx

    size = 0
    headers = {"Authorization": f"Bearer {token}"}
    stream = (client or httpx).stream
    with stream("GET", url, headers=headers, follow_redirects=True, timeout=600) as r:
        r.raise_for_status()
        with open(dest, "wb") as out:
            for chunk in r.iter_bytes(1 << 20):
                out.write(chunk)
                size += len(chunk)
    return size


def paired(name: str, a, b, runs: int, tmp: Path, target: float | None) -> dict:
    """A (the Hub client) against B (the plain baseline), RUNS rounds after a warm-up."""
    times: dict[str, list[float]] = {"a": [], "b": []}
    for n in range(runs + 1):
        order = [("a", a), ("b", b)] if n % 2 else [("b", b), ("a", a)]
        for side, fn in order:
            os.sync()
            t0 = time.perf_counter()
            fn(tmp / f"{side}-{n}")
            dt = time.perf_counter() - t0
            if n:
                times[side].append(dt)
        for p in tmp.glob(f"*-{n}"):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    ratios = [x / y for x, y in zip(times["a"], times["b"])]
    return {
        "figure": name,
        "hub_s": times["a"],
        "plain_s": times["b"],
        "ratio": c.median(times["a"]) / c.median(times["b"]),
        "round_ratios": ratios,
        "target": target,
    }


def measure(store: str, runs: int, tmp: Path, large: bool) -> list[dict]:
    import httpx
    from huggingface_hub import HfApi, hf_hub_download, snapshot_download

    out = []
    with registry_over(store, tmp, large) as (registry, token, sizes):

        def url(line: str, path: str = WEIGHTS) -> str:
            return f"{registry.url}/{line}/resolve/production/{path}"

        def snap(line: str):
            def fn(dest: Path) -> None:
                kw = {"endpoint": registry.url, "token": token, "cache_dir": dest}
                snapshot_download(line, revision="production", **kw)

            return fn

        def get(line: str, expect: int):
            def fn(dest: Path) -> None:
                assert plain_get(url(line), token, dest) == expect

            return fn

        redirected = httpx.get(url(LINE), headers={"Authorization": f"Bearer {token}"})
        tag = " (302 to S3)" if redirected.status_code == 302 else ""
        name = f"80 MB adapter, {store}{tag}"
        out.append(paired(name, snap(LINE), get(LINE, sizes[LINE]), runs, tmp, TARGET))
        if store != "local":
            return out
        if large:
            big = get(BIG, sizes[BIG])
            out.append(paired("1 GB set (4 members)", snap(SET), big, runs, tmp, TARGET_LARGE))
            out.append(paired("1 GB adapter", snap(BIG), big, runs, tmp, TARGET_LARGE))
        files = [
            f.path
            for f in HfApi(endpoint=registry.url, token=token).list_repo_tree(
                SMALL, revision="production", recursive=True
            )
            if getattr(f, "size", None) is not None
        ]
        with httpx.Client(headers={"Authorization": f"Bearer {token}"}) as client:

            def gets(dest: Path) -> None:
                dest.mkdir()
                for i, path in enumerate(files):
                    plain_get(url(SMALL, path), token, dest / str(i), client)

            def one_hf(dest: Path) -> None:
                kw = {"endpoint": registry.url, "token": token, "cache_dir": dest}
                hf_hub_download(SMALL, "adapter_config.json", revision="production", **kw)

            def one_get(dest: Path) -> None:
                plain_get(url(SMALL, "adapter_config.json"), token, dest, client)

            small = paired(f"{len(files)} small files", snap(SMALL), gets, runs, tmp, None)
            one = paired("1 small file (hf_hub_download)", one_hf, one_get, runs, tmp, None)
        out += [small, one]
        if large:  # a fresh process: the first download of a blob hashes it
            with running_registry(registry_root(registry)) as fresh:
                t0 = time.perf_counter()
                assert plain_get(url(BIG).replace(registry.url, fresh.url), token, tmp / "x")
                cold = [time.perf_counter() - t0]
                out.append({"figure": "1 GB GET, a fresh server's first", "plain_s": cold})
                (tmp / "x").unlink()
    return out


def registry_root(registry) -> Path:
    return registry.log.parent


def run(runs: int = 5, large: bool = True) -> dict:
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    tmp = Path(tempfile.mkdtemp(prefix="mint-bench-hub-", dir=os.environ.get("MINT_BENCH_TMP")))
    try:
        results = [x for s in ("local", "s3") for x in measure(s, runs, tmp / s, large)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"target": TARGET, "target_large": TARGET_LARGE, "runs": runs, "results": results}


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{min(values):.3f} / {c.median(values):.3f} / {max(values):.3f}"


def report(r: dict) -> str:
    rows = []
    for x in r["results"]:
        ratio, target = x.get("ratio"), x.get("target")
        rows.append(
            [
                x["figure"],
                _spread(x.get("hub_s", [])),
                _spread(x["plain_s"]),
                f"{ratio:.2f}x" if ratio else "-",
                _spread(x.get("round_ratios", [])).replace(".000", ""),
                c.verdict(ratio, target) + f" (<= {target}x)" if target else "-",
            ]
        )
    header = ["figure", "Hub client s min/med/max", "plain GET s", "ratio", "per round", "target"]
    return c.table(f"Hub protocol from a registry ({r['runs']} runs)", header, rows)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--no-large", action="store_true", help="skip the 1 GB figures")
    args = p.parse_args(argv)
    r = run(args.runs, not args.no_large)
    print(report(r))
    c.write_json("bench_hubproto", r)
    return r


if __name__ == "__main__":
    main()
