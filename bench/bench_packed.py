#!/usr/bin/env python
"""Cold sets in one read (issue 24): staging a 16-member set from cold, packed and not, against
PEFT's `load_adapter` of the 16 members one by one.

The set: a Llama base built from a config (hidden 512, 8 layers, random weights), 16 LoRA
adapters of rank 16 on every linear layer (q, k, v, o, gate, up, down: 56 modules, 4.4 MB
each), committed to a repository and pinned by one set commit (a router and 15 experts).
Each run starts from a base that already holds one other adapter (what a server staging a
new version holds), and from cold: the page cache of every file the run reads (adapter
folders, member blobs, the pack) is dropped first with posix_fadvise(POSIX_FADV_DONTNEED),
which needs no privileges, and checked with fincore when it is installed. Timed:

  * peft load_adapter x16: `PeftModel.load_adapter(folder)` for each member's folder;
  * mint unpacked, peft API: `Runtime.stage` reading each member's blob (hash-verified), every
    adapter added through peft's add_adapter and state-dict loading (mint before issue 24);
  * mint unpacked: the same, plain LoRAs added without peft's model-wide walks;
  * mint packed: `Runtime.stage` from the set's pack: one read, one hash, then slices;
  * mint packed, first stage: the pack built from the members (read, verified, written) too.

    python bench/bench_packed.py [--runs 5] [--hidden 512] [--layers 8] [--rank 16]
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LABELS = "chat agent coding ui weather joke story email search code python java rust css html"
MOL = """name = "packed"
protocol = "mol/1"
base = "bench-llama"
[router]
adapter = "m00"
labels = [{labels}]
prompt = "route.md"
default = "chat"
[experts]
{experts}
[summary]
adapter = "m01"
prompt = "summary.md"
"""


def build(root: Path, repo, args) -> tuple[list[Path], Path, str]:
    """The base, 16 member adapters and one more (held warm), committed; the set's commit id."""
    from mint import api
    from mint.examples.tiny import build_adapter, build_base, load_base

    base = build_base(root / "bench-llama", hidden=args.hidden, layers=args.layers, heads=8)
    model, _ = load_base(base)
    folders = [
        build_adapter(base, root / f"m{i:02d}", seed=i, r=args.rank, alpha=2 * args.rank,
                      targets=TARGETS, model=model)
        for i in range(17)
    ]  # fmt: skip
    api.base_add(repo, "bench-llama", base)
    for folder in folders[:16]:
        api.commit(repo, folder.name, folder, folder.name, author="bench")
    labels = LABELS.split()
    experts = "\n".join(f'{label} = "m{i + 1:02d}"' for i, label in enumerate(labels))
    mol = root / "set"
    mol.mkdir()
    quoted = ", ".join(f'"{label}"' for label in labels)
    (mol / "mol.toml").write_text(MOL.format(labels=quoted, experts=experts))
    (mol / "route.md").write_text("Route the request to one expert.\n")
    (mol / "summary.md").write_text("Summarise the turn.\n")
    set_id = api.set_commit(repo, mol / "mol.toml", "sixteen", author="bench").id
    return folders, base, set_id


def drop_cache(paths) -> int:
    """Drop the page cache of every file under PATHS; the bytes still cached (fincore, after
    up to three tries; -1 when fincore is not installed)."""
    files = []
    for path in map(Path, paths):
        files += [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
    gc.collect()  # a base of an earlier run may still map files (mapped pages stay cached)
    cached = -1
    for _ in range(3):
        for f in files:
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fdatasync(fd)  # dirty pages are not dropped
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        if not shutil.which("fincore") or not files:
            return -1
        out = subprocess.run(
            ["fincore", "--bytes", "--noheadings", "--output", "RES", *map(str, files)],
            capture_output=True, text=True, check=False,
        ).stdout  # fmt: skip
        cached = sum(int(x) for x in out.split() if x.isdigit())
        if cached == 0:
            break
    return cached


class Cases:
    """The timed cases over one repository, its set and the folders it was committed from."""

    def __init__(self, repo, folders: list[Path], base_dir: Path, set_id: str):
        from mint import api
        from mint.runtime.service import store_verifier

        self.repo, self.folders, self.base_dir, self.set_id = repo, folders, base_dir, set_id
        self.spec = api.set_spec(repo, set_id)
        self.members = [self.spec.router, *self.spec.experts.values()]
        assert len({m.commit_id for m in self.members}) == 16
        self.warm = api.commit(repo, "warm", folders[16], "warm", author="bench").id
        self.verify = store_verifier(repo)
        self.cached: list[int] = []  # bytes fincore found cached after each drop

    def peft_x16(self) -> float:
        """PeftModel.load_adapter of each member's folder, onto a model holding one adapter."""
        from peft import PeftModel

        from mint.examples.tiny import load_base

        model, _ = load_base(self.base_dir)
        peft = PeftModel.from_pretrained(model, self.folders[16], adapter_name="warm")
        self.cached.append(drop_cache(self.folders[:16]))
        folders = self.folders[:16]
        seconds, _ = c.timed(lambda: [peft.load_adapter(f, adapter_name=f.name) for f in folders])
        assert len(peft.peft_config) == 17
        return seconds

    def stage(self, packed: bool, fast: bool = True, build: bool = False) -> float:
        """Runtime.stage of the set onto a base holding one adapter: from its pack (PACKED;
        BUILD: none recorded yet) or member by member; plain LoRAs added FAST or by peft."""
        from mint import api, schema
        from mint.runtime.batching import BatchPolicy
        from mint.runtime.loader import SharedBase, adapter_name
        from mint.runtime.packed import pack_loader
        from mint.runtime.runtime import Runtime
        from mint.sets import pack as packs

        repo, spec = self.repo, self.spec
        base = SharedBase.load(self.base_dir)
        base.fast_lora = fast
        base.acquire(
            [base.prepare(api.set_spec(repo, self.warm).router)], [adapter_name(self.warm)]
        )
        load = pack_loader(repo, base, self.verify) if packed else None
        runtime = Runtime(base, verify=self.verify, load=load, batching=BatchPolicy.off())
        with repo.db.write() as conn:
            pack = packs.pack_of(conn, self.set_id)
            if build:  # no pack yet: the first stage builds it
                conn.execute(schema.set_packs.delete())
        if build:
            repo.store.delete(pack)
        files = [m.weights for m in self.members]
        files += [repo.store.local_path(b) for b in spec.blobs]
        if pack and repo.store.has(pack):
            files.append(repo.store.local_path(pack))
        self.cached.append(drop_cache(files))
        try:
            seconds, _ = c.timed(lambda: runtime.stage(spec))
            assert len(base.loaded()) == 17
        finally:
            runtime.close()
        return seconds

    def pack_size(self) -> int:
        from mint.sets import pack as packs

        with self.repo.db.read() as conn:
            return self.repo.store.size(packs.pack_of(conn, self.set_id))


def report(times: dict[str, list[float]], title: str) -> tuple[float, float]:
    """Print the table and the ratios; returns (packed vs peft, packed vs unpacked)."""
    peft = c.median(times["peft load_adapter x16"])
    rows = [
        [name, min(t), c.median(t), max(t), f"{peft / c.median(t):.2f}x"]
        for name, t in times.items()
    ]
    print(c.table(title, ["case", "min s", "median s", "max s", "speed-up vs peft"], rows))
    ratio = peft / c.median(times["mint packed"])
    verdict = "ok" if ratio >= 5 else "MISS"
    print(f"\npacked vs peft load_adapter x16: {ratio:.2f}x faster (target >= 5x: {verdict})")
    unpacked = c.median(times["mint unpacked"]) / c.median(times["mint packed"])
    print(f"packed vs mint unpacked: {unpacked:.2f}x faster")
    return ratio, unpacked


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--rank", type=int, default=16)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    load_before = os.getloadavg()[0]
    with c.temp_repo("sqlite", "packed") as (repo, tmp):
        cases = Cases(repo, *build(tmp, repo, args))
        timed = {
            "peft load_adapter x16": cases.peft_x16,
            "mint unpacked, peft API": lambda: cases.stage(False, fast=False),
            "mint unpacked": lambda: cases.stage(False),
            "mint packed": lambda: cases.stage(True),
            "mint packed, first stage": lambda: cases.stage(True, build=True),
        }
        cases.stage(True)  # warm up: imports, and the pack built once
        weights = sum(os.path.getsize(f / "adapter_model.safetensors") for f in cases.folders[:16])
        pack_size = cases.pack_size()
        times: dict[str, list[float]] = {name: [] for name in timed}
        for i in range(args.runs):  # interleaved, in a rotating order
            names = list(timed)
            for name in names[i % len(names) :] + names[: i % len(names)]:
                times[name].append(timed[name]())
    title = (
        f"staging a 16-member set from cold ({weights / 1e6:.1f} MB of weights, pack "
        f"{pack_size / 1e6:.1f} MB; rank {args.rank}, hidden {args.hidden}, {args.layers} "
        f"layers; {args.runs} runs; load average {load_before:.1f} to {os.getloadavg()[0]:.1f})"
    )
    ratio, unpacked = report(times, title)
    print(
        f"bytes still cached after each drop (fincore; -1: not measured): max {max(cases.cached)}"
    )
    c.write_json(
        "bench_packed",
        {"times": times, "ratio_vs_peft": ratio, "ratio_vs_unpacked": unpacked,
         "weights_bytes": weights, "pack_bytes": pack_size, "cached_after_drop": max(cases.cached),
         "args": vars(args)},
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
