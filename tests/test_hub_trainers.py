"""The trainers' own calls, unmodified, against a registry (issue 37): `PeftModel.push_to_hub`
and a `transformers.Trainer` trained two steps with `push_to_hub=True` make commits on their
lines, with HF_ENDPOINT and HF_TOKEN set (and HF_HUB_DISABLE_XET=1); what they pushed comes
back with `snapshot_download` and `PeftModel.from_pretrained` as the same bytes and the same
logits. They run in a fresh interpreter, as a training script does: huggingface_hub reads
HF_ENDPOINT when it is imported. A model card's model-index results become evaluations of
their own source, which a contract counts only when it says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mint import api

from support.hubupload import files_of, hub_registry, variant

pytestmark = [
    pytest.mark.xdist_group("registry"),
    pytest.mark.one_database(
        "postgresql",
        "the uploads commit through the Hub's write path, which test_hub_upload runs on both"
        " databases",
    ),
]

# argv: base folder, where to write what it kept locally. Prints one JSON line.
TRAIN_AND_PUSH = r"""
import json, sys, torch
from pathlib import Path
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
from huggingface_hub import snapshot_download

base_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
probe = torch.tensor([[1, 5, 7, 9, 11, 3]])
def logits(model):
    with torch.no_grad():
        return model(input_ids=probe).logits

def lora(seed):
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    peft = get_peft_model(model, config)
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn_like(p) * 0.05)
    return peft

# 1. PeftModel.push_to_hub
peft = lora(1).eval()
peft.push_to_hub("team-a/peft-pushed", commit_message="pushed by PEFT")
peft.save_pretrained(out / "peft")
expected = {"peft": logits(peft)}

# 2. transformers.Trainer, two steps on the CPU, then trainer.push_to_hub()
class Rows(torch.utils.data.Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        ids = torch.tensor([1, 5 + i, 7, 9, 11 + i, 3])
        return {"input_ids": ids, "labels": ids.clone()}

model = lora(2)
args = TrainingArguments(
    output_dir=str(out / "run"), use_cpu=True, max_steps=2, report_to=[],
    per_device_train_batch_size=4, learning_rate=1e-2, save_strategy="no",
    push_to_hub=True, hub_model_id="team-a/trained", logging_steps=1,
)
trainer = Trainer(model=model, args=args, train_dataset=Rows())
trainer.train()
trainer.push_to_hub(commit_message="two steps")
trainer.model.eval()
trainer.model.save_pretrained(out / "trained")
expected["trained"] = logits(trainer.model)

# 3. what the registry gives back: the same bytes, the same logits
same = {}
for name, repo_id in (("peft", "team-a/peft-pushed"), ("trained", "team-a/trained")):
    got = Path(snapshot_download(repo_id, cache_dir=str(out / "cache")))
    same[name + "_bytes"] = all(
        (got / f).read_bytes() == (out / name / f).read_bytes()
        for f in ("adapter_config.json", "adapter_model.safetensors")
    )
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    loaded = PeftModel.from_pretrained(base, repo_id, cache_dir=str(out / "cache")).eval()
    same[name + "_logits"] = bool(torch.allclose(logits(loaded), expected[name], atol=1e-6))
    same[name + "_files"] = sorted(p.name for p in got.iterdir())
print(json.dumps(same))
"""

CARD = """---
library_name: peft
base_model: tiny-llama
model-index:
- name: routed
  results:
  - task: {type: text-classification}
    dataset: {name: held-out requests, type: requests}
    metrics:
    - {type: accuracy, value: 0.93, name: Accuracy}
---
# routed
"""

COUNTS_CARDS = """
name = "card-gated"
channel = "staging"
lines = ["team-a/*"]
sources = ["model-card", "evaluator", "manual"]
[[metric]]
name = "accuracy"
min = 0.9
"""

IGNORES_CARDS = COUNTS_CARDS.replace('"card-gated"', '"card-blind"').replace(
    'sources = ["model-card", "evaluator", "manual"]\n', ""
)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def hub(request, tmp_path_factory, models):
    folder = tmp_path_factory.mktemp(f"hub-train-{request.param}")
    with hub_registry(request.param, folder, models) as h:
        yield h


def test_peft_and_trainer_push_as_they_push_to_the_hub(hub, models, tmp_path):
    env = {
        **os.environ,
        "HF_ENDPOINT": hub.url,
        "HF_TOKEN": hub.tokens["team-a"],
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "TRANSFORMERS_VERBOSITY": "error",
    }
    argv = [sys.executable, "-c", TRAIN_AND_PUSH, str(models["base"]), str(tmp_path)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    same = json.loads(done.stdout.strip().splitlines()[-1])
    assert same["peft_bytes"] and same["peft_logits"], same
    assert same["trained_bytes"] and same["trained_logits"], same
    pushed = api.show(hub.repo, "team-a/peft-pushed")
    assert pushed.author == "team-a" and pushed.message == "pushed by PEFT"
    trained = api.show(hub.repo, "team-a/trained")
    assert trained.message.startswith("two steps") and trained.peft["r"] == 4
    assert "training_args.bin" in trained.files and trained.pickles == ["training_args.bin"]
    assert "training_args.bin" in same["trained_files"]  # kept, and given back, never loaded
    assert api.fsck(hub.repo).ok


def test_a_model_cards_results_are_evaluations_a_contract_may_count(hub, models, tmp_path):
    for name, text in (("counts", COUNTS_CARDS), ("ignores", IGNORES_CARDS)):
        (tmp_path / f"{name}.toml").write_text(text)
        api.contract_add(hub.repo, tmp_path / f"{name}.toml", by="admin")
    folder = variant(models["a1"], tmp_path / "routed", "routed", **{"README.md": CARD})
    info = hub.api("team-a").upload_folder(
        repo_id="team-a/routed", folder_path=folder, commit_message="with its card"
    )
    cid = api.resolve(hub.repo, "team-a/routed")
    assert cid.startswith(info.oid)
    evals = api.evaluations_of(hub.repo, cid)
    assert {(e.contract, e.source, e.metrics["accuracy"]) for e in evals} == {
        ("card-gated", "model-card", 0.93),
        ("card-blind", "model-card", 0.93),
    }
    report = api.gate(hub.repo, cid, "staging")
    rows = {c.check: c for c in report.checks}
    assert rows["accuracy"].ok  # card-gated counts the card's number
    assert not rows["evaluation under card-blind v1"].ok  # card-blind counts no card
    assert set(files_of(folder)) == set(api.show(hub.repo, cid).files)
