#!/usr/bin/env python
"""Commit and checkout of an 80 MB, 7B-shaped LoRA adapter against copying and hashing it.

Figures (issue 12, "Commit at the speed of the disk"; issue 2 for checkout):
  * in-process commit of a new version vs `shutil.copyfile` + `hashlib.sha256` of the
    weights, in the same process: target <= 1.3x
  * in-process re-commit of the unchanged folder (the stat cache answers; no file is read):
    target <= 5 % of the first commit's time, and 0 bytes written
  * whole-process `mint commit` of a new version vs `cp -r` + `sync` (of the copied files) +
    `sha256sum` of the same folder, one shell line: target <= 1.3x
  * whole-process re-commit of the unchanged folder: target < 0.5 s
  * checkout of a commit vs `cp -r ADAPTER DST`: target <= 1.2x
  For information: the same content on a new line, CPU seconds of commit and baseline,
  `mint --version` (the interpreter's start-up floor).

Each pair is measured in one run, alternating which side goes first, and reported as medians.
Every version is a new folder, written before the timed part and left two seconds (the stat
cache's racy window: a file changed within it is read again next time, as git's index does),
so both sides read files that are warm in the page cache. Dirty pages are flushed (`sync`,
untimed) between measurements, so neither side pays for the other's writeback. The baseline's
copies are kept until the end, as mint keeps its blobs (on a virtual machine, memory the page
cache has not used before costs more to fill). The `mint` processes run with bytecode caching
on (PYTHONPYCACHEPREFIX in the temporary folder, warmed first), as an installed mint has its
.pyc files. Everything lives in a temporary folder removed at the end (MINT_BENCH_TMP chooses
where it is made).

    python bench/bench_store.py [--runs 5] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import os
import pstats
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402

# Llama-2-7B shapes.
HIDDEN = 4096
INTERMEDIATE = 11008
KV = 4096
LAYERS = 32
R = 16
BASE_NAME = "llama-7b-shape"
ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
WEIGHTS = "adapter_model.safetensors"
RACY_S = 2.1  # the stat cache trusts files whose times are 2 s older than their reading


def module_shapes() -> dict[str, tuple[int, int]]:
    """(in_features, out_features) of each targeted module."""
    return {
        "q_proj": (HIDDEN, HIDDEN),
        "k_proj": (HIDDEN, KV),
        "v_proj": (HIDDEN, KV),
        "o_proj": (HIDDEN, HIDDEN),
        "gate_proj": (HIDDEN, INTERMEDIATE),
        "up_proj": (HIDDEN, INTERMEDIATE),
        "down_proj": (INTERMEDIATE, HIDDEN),
    }


def tensor_specs() -> list[tuple[str, tuple[int, int]]]:
    """PEFT's names and shapes: lora_A is [r, in], lora_B is [out, r]."""
    shapes = module_shapes()
    out = []
    for i in range(LAYERS):
        for mod in ATTN + MLP:
            group = "self_attn" if mod in ATTN else "mlp"
            prefix = f"base_model.model.model.layers.{i}.{group}.{mod}"
            fan_in, fan_out = shapes[mod]
            out.append((f"{prefix}.lora_A.weight", (R, fan_in)))
            out.append((f"{prefix}.lora_B.weight", (fan_out, R)))
    return out


def write_base_config(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "torch_dtype": "bfloat16",
    }
    path = folder / "config.json"
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def write_adapter_config(folder: Path, r: int) -> None:
    """adapter_config.json of a rank-R LoRA on every attention and MLP projection."""
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": r,
        "lora_alpha": 32,
        "lora_dropout": 0.05,
        "bias": "none",
        "target_modules": list(ATTN + MLP),
        "base_model_name_or_path": BASE_NAME,
        "inference_mode": True,
    }
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")


def write_adapter(folder: Path, seed: int) -> int:
    """A PEFT adapter folder with random bf16 values, laid out as safetensors' save_file does
    (tensors by name, the header padded with spaces to 8 bytes). Written with numpy, so that
    no torch threads linger in the process that is timed. Returns the weights file's size."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    header, parts, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, shape in sorted(tensor_specs()):
        values = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
        raw = (values.view(np.uint32) >> 16).astype("<u2").tobytes()  # bf16: the high half
        header[name] = {
            "dtype": "BF16",
            "shape": list(shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        parts.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(folder / WEIGHTS, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for raw in parts:
            f.write(raw)
    write_adapter_config(folder, R)
    return (folder / WEIGHTS).stat().st_size


def sync() -> None:
    os.sync()


def cpu() -> float:
    t = os.times()
    return t.user + t.system


def profile(fn, top: int = 12) -> str:
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(top)
    return buf.getvalue()


def versions(root: Path, name: str, runs: int, seed: int) -> list[Path]:
    """RUNS new adapter folders, written now and then left past the stat cache's racy window."""
    folders = [root / f"{name}-{i}" for i in range(runs)]
    for i, folder in enumerate(folders):
        write_adapter(folder, seed + i)
    sync()
    time.sleep(RACY_S)
    return folders


def in_process(repo, tmp: Path, runs: int) -> dict:
    """Commit of each new version, its unchanged re-commit, and copyfile + sha256, alternating."""
    from mint import api

    out = {
        k: [] for k in ("commit", "recommit", "recommit_bytes", "base", "commit_cpu", "base_cpu")
    }
    keep = tmp / "copies"
    keep.mkdir()
    for i, folder in enumerate(versions(tmp, "v", runs, seed=1000)):
        weights = folder / WEIGHTS

        def baseline() -> None:
            def work():
                shutil.copyfile(weights, keep / f"{i}.safetensors")
                with open(weights, "rb") as f:
                    hashlib.file_digest(f, "sha256")

            t0 = cpu()
            out["base"].append(c.timed(work)[0])
            out["base_cpu"].append(cpu() - t0)
            sync()

        def mint() -> None:
            t0 = cpu()
            t, res = c.timed(lambda: api.commit(repo, "bench", folder, f"v{i}", author="b"))
            out["commit_cpu"].append(cpu() - t0)
            assert res.created and res.bytes_written > 0, res
            out["commit"].append(t)
            sync()
            t, res = c.timed(lambda: api.commit(repo, "bench", folder, "again", author="b"))
            assert not res.created, res
            out["recommit"].append(t)
            out["recommit_bytes"].append(res.bytes_written)

        for fn in (baseline, mint) if i % 2 else (mint, baseline):
            fn()
    return out


def whole_process(repo, tmp: Path, runs: int) -> dict:
    """`mint commit` and its unchanged re-commit as new processes, against cp -r + sync +
    sha256sum of the same folder, alternating."""
    run = c.mint_process(repo.root, tmp)

    run("--version")
    run("log", "-n", "1")  # warm: bytecode written, page cache
    out = {k: [] for k in ("commit", "recommit", "base", "version")}
    for i, folder in enumerate(versions(tmp, "w", runs, seed=5000)):
        dst = tmp / f"cp-{i}"

        def baseline() -> None:
            files = " ".join(f'"{dst / p.name}"' for p in folder.iterdir())
            out["base"].append(
                c.sh(f'cp -r "{folder}" "{dst}" && sync {files} && sha256sum "{folder}"/*')
            )
            sync()

        def mint_side() -> None:
            out["commit"].append(run("commit", "bench-cli", str(folder), "-m", f"w{i}"))
            sync()
            out["recommit"].append(run("commit", "bench-cli", str(folder), "-m", "again"))

        for fn in (baseline, mint_side) if i % 2 else (mint_side, baseline):
            fn()
        out["version"].append(run("--version"))
    return out


def same_content_new_line(repo, folder: Path, runs: int) -> dict:
    from mint import api

    out = {"s": [], "bytes": []}
    for i in range(runs):
        t, res = c.timed(lambda: api.commit(repo, f"copy-{i}", folder, "same", author="b"))
        assert res.created, res
        out["s"].append(t)
        out["bytes"].append(res.bytes_written)
    return out


def checkout_vs_cp(repo, adapter: Path, tmp: Path, runs: int, size: int) -> dict:
    from mint import api

    head = api.resolve(repo, "bench")
    co_root, cpr_root = tmp / "co", tmp / "cpr"
    co_root.mkdir()
    cpr_root.mkdir()
    api.checkout(repo, head, co_root / "warm")  # untimed
    shutil.rmtree(co_root / "warm")
    sync()
    co_s, cpr_s = [], []
    for i in range(runs):

        def checkout() -> None:
            dest = co_root / f"v{i}"
            t, res = c.timed(lambda: api.checkout(repo, head, dest))
            assert res.bytes > size and (dest / WEIGHTS).stat().st_size == size, res
            shutil.rmtree(dest)
            sync()
            co_s.append(t)

        def cp_r() -> None:
            dest = cpr_root / f"v{i}"
            cpr_s.append(c.sh(f'cp -r "{adapter}" "{dest}"'))
            shutil.rmtree(dest)
            sync()

        for fn in (checkout, cp_r) if i % 2 == 0 else (cp_r, checkout):
            fn()
    show_s = c.repeat(lambda: api.show(repo, head), runs=runs)
    return {"checkout_s": co_s, "cp_r_s": cpr_s, "show_s": show_s}


def run(runs: int = 5, checkout_runs: int = 15, do_profile: bool = False) -> dict:
    from mint import api
    from mint.repo import init

    tmp = Path(tempfile.mkdtemp(prefix="mint-bench-store-", dir=os.environ.get("MINT_BENCH_TMP")))
    try:
        repo, _ = init(tmp / "repo")
        api.base_add(repo, BASE_NAME, write_base_config(tmp / "base"))
        size = write_adapter(tmp / "warm", seed=0)
        api.commit(repo, "warm", tmp / "warm", "warm-up: imports, first connection", author="b")
        inproc = in_process(repo, tmp, runs)
        whole = whole_process(repo, tmp, runs)
        same = same_content_new_line(repo, tmp / f"v-{runs - 1}", runs)
        co = checkout_vs_cp(repo, tmp / f"v-{runs - 1}", tmp, checkout_runs, size)
        profiles = {}
        if do_profile:
            folder = versions(tmp, "p", 1, seed=99_999)[0]
            profiles["commit"] = profile(
                lambda: api.commit(repo, "bench", folder, "p", author="b")
            )
            profiles["recommit"] = profile(
                lambda: api.commit(repo, "bench", folder, "p", author="b")
            )
        repo.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summarize(size, runs, checkout_runs, inproc, whole, same, co, profiles)


def summarize(size, runs, checkout_runs, inproc, whole, same, co, profiles) -> dict:
    med = c.median
    return {
        "adapter_bytes": size,
        "tensors": len(tensor_specs()),
        "runs": runs,
        "checkout_runs": checkout_runs,
        "in_process": inproc,
        "whole_process": whole,
        "same_content_new_line": same,
        **co,
        "commit_ratio": med(inproc["commit"]) / med(inproc["base"]),
        "recommit_fraction": med(inproc["recommit"]) / med(inproc["commit"]),
        "whole_commit_ratio": med(whole["commit"]) / med(whole["base"]),
        "whole_recommit_s": med(whole["recommit"]),
        "checkout_ratio": med(co["checkout_s"]) / med(co["cp_r_s"]),
        "profiles": profiles,
    }


def report(r: dict) -> str:
    med = c.median
    ms = lambda xs: med(xs) * 1000  # noqa: E731
    ip, wp, same = r["in_process"], r["whole_process"], r["same_content_new_line"]
    rows = [
        [
            "commit, new version, in-process (ms)",
            ms(ip["commit"]),
            ms(ip["base"]),
            f"{r['commit_ratio']:.2f}x",
            "<= 1.3x",
            c.verdict(r["commit_ratio"], 1.3),
        ],
        ["  (info) CPU seconds (ms)", ms(ip["commit_cpu"]), ms(ip["base_cpu"]), "-", "-", ""],
        [
            "re-commit unchanged, in-process (ms)",
            ms(ip["recommit"]),
            ms(ip["commit"]),
            f"{r['recommit_fraction'] * 100:.1f} %",
            "<= 5 %",
            c.verdict(r["recommit_fraction"], 0.05),
        ],
        ["  bytes written", max(ip["recommit_bytes"]), "-", "-", "0", _zero(ip["recommit_bytes"])],
        [
            "commit, new version, whole process (ms)",
            ms(wp["commit"]),
            ms(wp["base"]),
            f"{r['whole_commit_ratio']:.2f}x",
            "<= 1.3x",
            c.verdict(r["whole_commit_ratio"], 1.3),
        ],
        [
            "re-commit unchanged, whole process (ms)",
            ms(wp["recommit"]),
            "-",
            "-",
            "< 500 ms",
            c.verdict(r["whole_recommit_s"], 0.5),
        ],
        ["  (info) mint --version (ms)", ms(wp["version"]), "-", "-", "-", "start-up"],
        ["same content, new line (ms)", ms(same["s"]), "-", "-", "-", "(info)"],
        ["  bytes written", max(same["bytes"]), "-", "-", "0", _zero(same["bytes"])],
        [
            "checkout vs cp -r (ms)",
            ms(r["checkout_s"]),
            ms(r["cp_r_s"]),
            f"{r['checkout_ratio']:.2f}x",
            "<= 1.2x",
            c.verdict(r["checkout_ratio"], 1.2),
        ],
        ["  (info) api.show of that commit", ms(r["show_s"]), "-", "-", "-", "catalog read"],
    ]
    header = ["figure", "mint", "baseline", "ratio", "target", ""]
    mb = r["adapter_bytes"] / 1e6
    title = (
        f"Store: {mb:.1f} MB adapter, {r['tensors']} bf16 tensors; medians of {r['runs']} runs "
        f"(checkout: {r['checkout_runs']}); baselines: copyfile+sha256 in-process, "
        "cp -r + sync + sha256sum whole process"
    )
    out = c.table(title, header, rows)
    for name, text in r.get("profiles", {}).items():
        out += f"\n\nProfile of one {name}:\n{text}"
    return out


def _zero(values: list[int]) -> str:
    return "ok" if max(values) == 0 else "MISS"


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--checkout-runs", type=int, default=15)
    p.add_argument(
        "--profile", action="store_true", help="also print cProfile of a commit and a re-commit"
    )
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    r = run(args.runs, args.checkout_runs, args.profile)
    r["wall_s"] = time.perf_counter() - t0
    print(report(r))
    path = c.write_json("bench_store", r)
    print(f"\n(results in {path.relative_to(c.REPO_ROOT)}; {r['wall_s']:.0f} s)")
    return r


if __name__ == "__main__":
    main()
