#!/usr/bin/env python
"""Commit and checkout of an 80 MB, 7B-shaped LoRA adapter against `cp` and `sha256sum`.

Figures (issue 2, "Figures to measure"):
  * commit of a new version (new blobs) vs `cp FILE DST && sha256sum FILE`: target <= 1.5x
  * re-committing unchanged content writes 0 new bytes
  * checkout of that commit vs `cp -r ADAPTER DST`: target <= 1.2x

Each pair is measured in one run, alternating which side goes first, and reported as medians.
Both sides read files that are warm in the page cache (the adapter has just been written; the
blobs have just been stored). Dirty pages are flushed (`sync`, untimed) between measurements,
so neither side pays for the other's writeback. Everything lives in a temporary folder that is
removed at the end (set MINT_BENCH_TMP to choose where it is made).

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


def write_adapter(folder: Path, seed: int) -> int:
    """A PEFT adapter folder with random bf16 values; returns the weights file's size."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    tensors = {
        name: torch.randn(shape, generator=gen, dtype=torch.float32).mul_(0.02).to(torch.bfloat16)
        for name, shape in tensor_specs()
    }
    save_file(tensors, str(folder / WEIGHTS))
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": R,
        "lora_alpha": 32,
        "lora_dropout": 0.05,
        "bias": "none",
        "target_modules": list(ATTN + MLP),
        "base_model_name_or_path": BASE_NAME,
        "inference_mode": True,
    }
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return (folder / WEIGHTS).stat().st_size


def sync() -> None:
    os.sync()


def profile(fn, top: int = 12) -> str:
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(top)
    return buf.getvalue()


def run(runs: int = 5, checkout_runs: int = 15, do_profile: bool = False) -> dict:
    from mint import api
    from mint.repo import init

    tmp = Path(tempfile.mkdtemp(prefix="mint-bench-store-", dir=os.environ.get("MINT_BENCH_TMP")))
    try:
        repo, _ = init(tmp / "repo")
        api.base_add(repo, BASE_NAME, write_base_config(tmp / "base"))
        adapter = tmp / "adapter"
        weights = adapter / WEIGHTS
        cp_dst = tmp / "cp-dst"
        cp_dst.mkdir()
        size = write_adapter(adapter, seed=0)
        api.commit(repo, "warm", adapter, "warm-up: imports, first connection")  # untimed

        mint_s, base_s, base_sync_s, base_py_s = [], [], [], []
        for i in range(runs):
            write_adapter(adapter, seed=1000 + i)  # new values: new blobs; the file is now warm
            sync()

            def baseline() -> None:
                t = c.sh(f'cp "{weights}" "{cp_dst / WEIGHTS}" && sha256sum "{weights}"')
                os.unlink(cp_dst / WEIGHTS)
                sync()
                base_s.append(t)

            def mint() -> None:
                t, res = c.timed(lambda: api.commit(repo, "bench", adapter, f"version {i}"))
                assert res.created and res.bytes_written >= size, res
                sync()
                mint_s.append(t)

            def baseline_py() -> None:
                # For information: the same work in-process, with OpenSSL's sha256 (as mint uses).
                def work():
                    shutil.copyfile(weights, cp_dst / WEIGHTS)
                    with open(weights, "rb") as f:
                        hashlib.file_digest(f, "sha256")

                t, _ = c.timed(work)
                os.unlink(cp_dst / WEIGHTS)
                sync()
                base_py_s.append(t)

            order = [baseline, mint, baseline_py]
            for fn in order[i % 3 :] + order[: i % 3]:
                fn()
            # For information: the baseline with the copy made durable, as mint's blobs are.
            t = c.sh(
                f'cp "{weights}" "{cp_dst / WEIGHTS}" && sync "{cp_dst / WEIGHTS}" && sha256sum '
                f'"{weights}"'
            )
            os.unlink(cp_dst / WEIGHTS)
            base_sync_s.append(t)
            sync()

        # (b) the same content again: on the same line (nothing recorded), and on a new line.
        same_s, same_bytes, newline_s, newline_bytes, sha_s = [], [], [], [], []
        for i in range(runs):
            t, res = c.timed(lambda: api.commit(repo, "bench", adapter, "unchanged"))
            assert not res.created, res
            same_s.append(t)
            same_bytes.append(res.bytes_written)
            t, res = c.timed(
                lambda: api.commit(repo, f"copy-{i}", adapter, "same content, new line")
            )
            assert res.created, res
            newline_s.append(t)
            newline_bytes.append(res.bytes_written)
            sha_s.append(c.sh(f'sha256sum "{weights}"'))

        # (c) checkout against cp -r, each into a fresh folder.
        head = api.resolve(repo, "bench")
        co_s, cpr_s = [], []
        co_root, cpr_root = tmp / "co", tmp / "cpr"
        co_root.mkdir()
        cpr_root.mkdir()
        api.checkout(repo, head, co_root / "warm")  # untimed
        shutil.rmtree(co_root / "warm")
        sync()
        for i in range(checkout_runs):

            def checkout() -> float:
                dest = co_root / f"v{i}"
                t, res = c.timed(lambda: api.checkout(repo, head, dest))
                assert res.bytes > size, res
                assert (dest / WEIGHTS).stat().st_size == size
                shutil.rmtree(dest)
                sync()
                return t

            def cp_r() -> float:
                dest = cpr_root / f"v{i}"
                t = c.sh(f'cp -r "{adapter}" "{dest}"')
                shutil.rmtree(dest)
                sync()
                return t

            if i % 2 == 0:
                co_s.append(checkout())
                cpr_s.append(cp_r())
            else:
                cpr_s.append(cp_r())
                co_s.append(checkout())

        # For information: the catalog part of a checkout (it reads the commit's full detail).
        show_s = c.repeat(lambda: api.show(repo, head), runs=checkout_runs)

        profiles = {}
        if do_profile:
            write_adapter(adapter, seed=99_999)
            sync()
            profiles["commit"] = profile(lambda: api.commit(repo, "bench", adapter, "profiled"))
            sync()
            # As in the timed runs: the blob has been read once, and the last copy deleted.
            api.checkout(repo, "bench", co_root / "profile-warm")
            shutil.rmtree(co_root / "profile-warm")
            sync()
            profiles["checkout"] = profile(
                lambda: api.checkout(repo, "bench", co_root / "profiled")
            )
        repo.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    med = c.median
    results = {
        "adapter_bytes": size,
        "tensors": len(tensor_specs()),
        "runs": runs,
        "checkout_runs": checkout_runs,
        "commit_new_s": mint_s,
        "cp_sha256sum_s": base_s,
        "cp_sync_sha256sum_s": base_sync_s,
        "copyfile_hashlib_s": base_py_s,
        "recommit_same_line_s": same_s,
        "recommit_same_line_bytes": same_bytes,
        "commit_same_content_new_line_s": newline_s,
        "commit_same_content_new_line_bytes": newline_bytes,
        "sha256sum_s": sha_s,
        "checkout_s": co_s,
        "cp_r_s": cpr_s,
        "show_s": show_s,
        "commit_ratio": med(mint_s) / med(base_s),
        "commit_ratio_vs_durable_cp": med(mint_s) / med(base_sync_s),
        "commit_ratio_vs_in_process": med(mint_s) / med(base_py_s),
        "checkout_ratio": med(co_s) / med(cpr_s),
        "profiles": profiles,
    }
    return results


def report(r: dict) -> str:
    med = c.median
    ms = lambda xs: med(xs) * 1000  # noqa: E731
    header = ["figure", "mint", "baseline", "ratio", "target", ""]
    rows = [
        [
            "commit, new 80 MB version (ms)",
            ms(r["commit_new_s"]),
            ms(r["cp_sha256sum_s"]),
            f"{r['commit_ratio']:.2f}x",
            "<= 1.5x",
            c.verdict(r["commit_ratio"], 1.5),
        ],
        [
            "  (info) baseline with `sync DST`",
            ms(r["commit_new_s"]),
            ms(r["cp_sync_sha256sum_s"]),
            f"{r['commit_ratio_vs_durable_cp']:.2f}x",
            "-",
            "",
        ],
        [
            "  (info) in-process copyfile+hashlib",
            ms(r["commit_new_s"]),
            ms(r["copyfile_hashlib_s"]),
            f"{r['commit_ratio_vs_in_process']:.2f}x",
            "-",
            "",
        ],
        [
            "re-commit unchanged, same line (ms)",
            ms(r["recommit_same_line_s"]),
            ms(r["sha256sum_s"]),
            f"{med(r['recommit_same_line_s']) / med(r['sha256sum_s']):.2f}x",
            "-",
            "vs sha256sum",
        ],
        [
            "  bytes written",
            max(r["recommit_same_line_bytes"]),
            "-",
            "-",
            "0",
            "ok" if max(r["recommit_same_line_bytes"]) == 0 else "MISS",
        ],
        [
            "same content, new line (ms)",
            ms(r["commit_same_content_new_line_s"]),
            ms(r["sha256sum_s"]),
            f"{med(r['commit_same_content_new_line_s']) / med(r['sha256sum_s']):.2f}x",
            "-",
            "vs sha256sum",
        ],
        [
            "  bytes written",
            max(r["commit_same_content_new_line_bytes"]),
            "-",
            "-",
            "0",
            "ok" if max(r["commit_same_content_new_line_bytes"]) == 0 else "MISS",
        ],
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
    mb = r["adapter_bytes"] / 1e6
    title = (
        f"Store: {mb:.1f} MB adapter, {r['tensors']} bf16 tensors; medians of {r['runs']} runs "
        f"(checkout: {r['checkout_runs']})"
    )
    out = c.table(title, header, rows)
    for name, text in r.get("profiles", {}).items():
        out += f"\n\nProfile of one {name}:\n{text}"
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--checkout-runs", type=int, default=15)
    p.add_argument(
        "--profile", action="store_true", help="also print cProfile of one commit and one checkout"
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
