"""A commit killed at any point leaves a clean repository: head unchanged or complete."""

import json
import signal
import subprocess
import sys
import time

import numpy as np
from safetensors.numpy import save_file

from mint import api

LAYERS, HIDDEN, R = 32, 1024, 64


def big_adapter(folder, seed):
    """About 34 MB of float16 LoRA weights over a 32-layer, 1024-wide base."""
    rng = np.random.default_rng(seed)
    folder.mkdir()
    tensors = {}
    for i in range(LAYERS):
        for proj in ("q_proj", "v_proj"):
            prefix = f"base_model.model.model.layers.{i}.self_attn.{proj}"
            tensors[f"{prefix}.lora_A.weight"] = rng.standard_normal((R, HIDDEN)).astype(np.float16)
            tensors[f"{prefix}.lora_B.weight"] = rng.standard_normal((HIDDEN, R)).astype(np.float16)
    for i in range(LAYERS):
        for part in ("mlp.up_proj", "mlp.gate_proj"):
            prefix = f"base_model.model.model.layers.{i}.{part}"
            tensors[f"{prefix}.lora_A.weight"] = rng.standard_normal((R, HIDDEN)).astype(np.float16)
            tensors[f"{prefix}.lora_B.weight"] = rng.standard_normal((HIDDEN * 2, R)).astype(np.float16)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "r": R, "lora_alpha": 2 * R, "base_model_name_or_path": "big-base",
        "target_modules": ["q_proj", "v_proj", "up_proj", "gate_proj"],
    }))  # fmt: skip
    return folder


def test_kill_during_commit_never_corrupts(repo, mint, tmp_path):
    base = tmp_path / "big-base"
    base.mkdir()
    (base / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": HIDDEN, "num_hidden_layers": LAYERS}))
    assert mint("base", "add", "big-base", base).code == 0
    first = mint("commit", "big", big_adapter(tmp_path / "v0", 0), "-m", "v0", "--json")
    assert first.code == 0, first
    head = first.json()["id"]
    outcomes = []
    for n, delay in enumerate((0.4, 0.7, 0.9, 1.1, 1.3, 1.6, 2.0, 3.0)):
        folder = big_adapter(tmp_path / f"v{n + 1}", n + 1)
        proc = subprocess.Popen(
            [sys.executable, "-m", "mint", "--repo", str(repo.root), "commit", "big", str(folder), "-m", f"v{n + 1}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        report = api.fsck(repo)
        assert report.ok, report.problems
        new_head = api.resolve(repo, "big")
        if new_head != head:  # the commit completed before the kill: it must be whole
            detail = api.show(repo, new_head)
            assert detail.parents == [head]
            for f in detail.files.values():
                repo.store.verify(f.sha256)
            outcomes.append("complete")
            head = new_head
        else:
            outcomes.append("unchanged")
    assert len(api.log(repo, "big")) == 1 + outcomes.count("complete")
    # Whatever the kills left behind is unreferenced, and gc clears it.
    api.gc(repo, grace_seconds=0)
    assert api.fsck(repo).dangling == []
    assert "unchanged" in outcomes, outcomes
