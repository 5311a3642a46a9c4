"""Train tiny MoL adapters on the CPU in seconds, for the demo, tests and benchmarks.

The data are synthetic and clearly separable: each request mixes a few filler words with
topic words that belong to exactly one label. The router learns to emit the label after the
`model_id=` prefill (the target `mint.runtime.router` scores); each specialist learns one
fixed answer for its own topic, so that answers show which expert wrote them; the `chat`
specialist also learns to write summaries, since the demo set names it as the summary adapter.

All words are in `mint.examples.tiny.VOCAB_TEXT`, so the base that `build_base` there writes
tokenizes every request without unknown tokens.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mint.runtime import prompts

LABELS = ("chat", "agent", "coding", "ui")

TOPICS = {
    "chat": "hello hi thanks thank good morning evening weather today tell joke story feel happy "
    "sad talk friend day night".split(),
    "agent": "plan book schedule meeting email send search web browse click open file run tool "
    "call api fetch order ticket flight hotel task automate workflow step".split(),
    "coding": "code python function bug fix error compile test class variable loop list sort "
    "array string java rust write refactor debug".split(),
    "ui": "button layout color css html page design screen font margin style component react "
    "form modal icon theme dark light pixel align center".split(),
}
FILLER = (
    "please can could would you i we me my your the a an to of and for with is this that it how "
    "what"
).split()

ANSWERS = {
    "chat": "hello friend , good day to you !",
    "agent": "plan : search web , book flight , send email .",
    "coding": "fix : write python function , run test .",
    "ui": "design : align button center , dark theme .",
}

ROUTE_PROMPT = (
    "choose the expert for the user . respond only with the label : chat , agent , coding or ui ."
)
SUMMARY_PROMPT = "summarize the turn ."

Example = tuple[list[int], list[int]]  # (prompt ids, target ids the loss is taken on)


def synthetic_request(
    label: str, rng: random.Random, topics: dict[str, Sequence[str]] = TOPICS
) -> str:
    """One request: 2-4 topic words of `label` (from `topics`) among 1-3 filler words, shuffled."""
    words = rng.sample(topics[label], rng.randint(2, 4)) + rng.sample(FILLER, rng.randint(1, 3))
    rng.shuffle(words)
    return " ".join(words) + rng.choice([" ?", " .", ""])


def synthetic_requests(
    n: int,
    *,
    seed: int = 0,
    labels: Sequence[str] = LABELS,
    topics: dict[str, Sequence[str]] = TOPICS,
) -> list[dict]:
    """`n` labelled requests, cycling through the labels: `{"messages": [...], "label": ...}`.

    `topics` gives each label's words (default: all of them; the loop demo passes subsets,
    its phrasing families)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        label = labels[i % len(labels)]
        out.append(
            {
                "messages": [{"role": "user", "content": synthetic_request(label, rng, topics)}],
                "label": label,
            }
        )
    return out


def write_jsonl(records: Sequence[dict], path: str | Path) -> Path:
    """Write records one JSON object per line (the format `route-eval --data` reads)."""
    path = Path(path)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _example(
    tokenizer: Any, head: str, body: str, target: str, with_space: bool = True
) -> Example:
    prompt = prompts.encode_prompt(tokenizer, head, body, 10**6)
    target_ids = prompts.encode(tokenizer, (" " if with_space else "") + target) + [
        tokenizer.eos_token_id
    ]
    return prompt, target_ids


def router_examples(tokenizer: Any, records: Sequence[dict], route_prompt: str) -> list[Example]:
    """Route prompt -> label tokens + end token, exactly what the router scores."""
    from mint.runtime.router import label_sequences

    labels = sorted({r["label"] for r in records})
    targets = dict(zip(labels, label_sequences(tokenizer, labels)))
    out = []
    for record in records:
        head, body = prompts.route_text(route_prompt, record["messages"])
        out.append((prompts.encode_prompt(tokenizer, head, body, 10**6), targets[record["label"]]))
    return out


def expert_examples(
    tokenizer: Any, records: Sequence[dict], label: str, summary_prompt: str | None = None
) -> list[Example]:
    """Requests of `label` -> its answer; with `summary_prompt`, also every turn -> its summary."""
    out = []
    for record in records:
        if record["label"] == label:
            head, body = prompts.answer_text(record["messages"], label)
            out.append(_example(tokenizer, head, body, ANSWERS[label]))
        if summary_prompt is not None:
            user = prompts.last_user(record["messages"])
            head, body = prompts.summary_text(summary_prompt, user, ANSWERS[record["label"]])
            out.append(_example(tokenizer, head, body, f"{record['label']} answer ."))
    return out


def _batch(examples: Sequence[Example], pad_id: int):
    """Right-padded ids, attention mask and labels (-100 outside the targets)."""
    import torch

    length = max(len(p) + len(t) for p, t in examples)
    ids = torch.full((len(examples), length), pad_id, dtype=torch.long)
    labels = torch.full_like(ids, -100)
    mask = torch.zeros_like(ids)
    for row, (prompt, target) in enumerate(examples):
        seq = prompt + target
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
        labels[row, len(prompt) : len(seq)] = torch.tensor(target)
    return ids, mask, labels


def fit(
    model: Any,
    examples: Sequence[Example],
    *,
    steps: int,
    lr: float,
    batch_size: int,
    seed: int,
    pad_id: int,
) -> float:
    """Train the trainable parameters of `model` on the examples; returns the last loss."""
    import torch

    rng = random.Random(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    model.train()
    loss_value = float("nan")
    for _ in range(steps):
        ids, mask, labels = _batch(
            rng.sample(list(examples), min(batch_size, len(examples))), pad_id
        )
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1)
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss_value = float(loss.detach())
    model.eval()
    return loss_value


@dataclass(frozen=True)
class TrainSettings:
    """LoRA shape and optimiser settings for one adapter."""

    steps: int = 150
    lr: float = 5e-3
    batch_size: int = 16
    r: int = 8
    alpha: int = 16
    # The tiny base has random weights, so its hidden states barely tell words apart: LoRA on
    # the embeddings gives each word a learnable code, and LoRA on lm_head lets the logits
    # become confident (the random head alone cannot move them far).
    targets: tuple[str, ...] = ("embed_tokens", "q_proj", "k_proj", "v_proj", "o_proj", "lm_head")
    seed: int = 0
    threads: int = 1  # one torch thread is several times faster than two on a busy 2-core box


def train_adapter(
    base_dir: str | Path,
    out_dir: str | Path,
    examples: Sequence[Example],
    settings: TrainSettings,
    *,
    model: Any = None,
) -> Path:
    """Train a fresh LoRA on `examples` and save it as PEFT does; `model` is left unchanged."""
    import torch
    from peft import LoraConfig, get_peft_model

    from mint.examples.tiny import load_base, set_base_name

    tokenizer = None
    if model is None:
        model, tokenizer = load_base(base_dir)
    pad_id = tokenizer.pad_token_id if tokenizer is not None else model.config.pad_token_id
    torch.manual_seed(settings.seed)
    config = LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        target_modules=list(settings.targets),
        lora_dropout=0.0,
    )
    peft_model = get_peft_model(model, config)
    threads = torch.get_num_threads()
    torch.set_num_threads(settings.threads or threads)
    try:
        fit(
            peft_model,
            examples,
            steps=settings.steps,
            lr=settings.lr,
            batch_size=settings.batch_size,
            seed=settings.seed,
            pad_id=pad_id,
        )
    finally:
        torch.set_num_threads(threads)
    out = Path(out_dir)
    # only the LoRA tensors: never a copy of the base's embedding or head
    peft_model.save_pretrained(out, save_embedding_layers=False)
    peft_model.unload()
    set_base_name(out, Path(base_dir).name)
    return out


def train_router(
    base_dir: str | Path,
    out_dir: str | Path,
    records: Sequence[dict],
    *,
    route_prompt: str = ROUTE_PROMPT,
    settings: TrainSettings = TrainSettings(),
    model: Any = None,
) -> Path:
    """Train the L0 router adapter to emit each record's label after the `model_id=` prefill."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    return train_adapter(
        base_dir, out_dir, router_examples(tokenizer, records, route_prompt), settings, model=model
    )


def train_expert(
    base_dir: str | Path,
    out_dir: str | Path,
    label: str,
    records: Sequence[dict],
    *,
    summary_prompt: str | None = None,
    settings: TrainSettings = TrainSettings(steps=100),
    model: Any = None,
) -> Path:
    """Train a specialist that answers its label's requests (and, given `summary_prompt`,
    writes the summary of any turn)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    examples = expert_examples(tokenizer, records, label, summary_prompt)
    return train_adapter(base_dir, out_dir, examples, settings, model=model)


def mislabel(records: Sequence[dict], swap: dict[str, str]) -> list[dict]:
    """The records with labels swapped as `swap` says: data for a router wrong on purpose."""
    return [{**r, "label": swap.get(r["label"], r["label"])} for r in records]


def train_experts(
    base: Path, out: Path, records: Sequence[dict], *, model: Any, seed: int = 0, steps: int = 100
) -> dict[str, Path]:
    """The four specialists, one folder each under `out`; `chat` also writes summaries."""
    settings = TrainSettings(steps=steps, seed=seed)
    return {
        label: train_expert(
            base,
            out / label,
            label,
            records,
            model=model,
            settings=settings,
            summary_prompt=SUMMARY_PROMPT if label == "chat" else None,
        )
        for label in LABELS
    }


def write_prompts(out: Path) -> tuple[Path, Path]:
    """The route and summary prompt files a set commits beside its mol.toml."""
    (out / "route.md").write_text(ROUTE_PROMPT + "\n")
    (out / "summary.md").write_text(SUMMARY_PROMPT + "\n")
    return out / "route.md", out / "summary.md"


@dataclass(frozen=True)
class DemoFiles:
    """Everything `build_demo` wrote: the base, adapter folders, prompt files and data."""

    base: Path
    router: Path
    experts: dict[str, Path]
    degraded_router: Path
    route_prompt: Path
    summary_prompt: Path
    train_data: Path
    heldout_data: Path


def build_demo(
    out_dir: str | Path,
    *,
    seed: int = 0,
    n_train: int = 400,
    n_heldout: int = 200,
    hidden: int = 64,
    heads: int = 4,
) -> DemoFiles:
    """Build a tiny base and train the demo's router, its four specialists and a degraded router.

    The degraded router learned `coding` and `ui` swapped, so it routes about half the
    held-out requests wrongly. Runs in well under a minute on two CPU cores. `hidden=128,
    heads=2` gives a base vLLM's CPU attention accepts (a head size of 64).
    """
    from mint.examples.tiny import build_base, load_base

    out = Path(out_dir)
    base = build_base(out / "tiny-llama", hidden=hidden, heads=heads, seed=seed)
    model, _ = load_base(base)
    records = synthetic_requests(n_train, seed=seed + 1)
    settings = TrainSettings(seed=seed)
    router = train_router(base, out / "router", records, model=model, settings=settings)
    swapped = mislabel(records, {"coding": "ui", "ui": "coding"})
    degraded = train_router(base, out / "router-degraded", swapped, model=model, settings=settings)
    experts = train_experts(base, out, records, model=model, seed=seed)
    route_prompt, summary_prompt = write_prompts(out)
    heldout = synthetic_requests(n_heldout, seed=seed + 2)
    return DemoFiles(
        base=base,
        router=router,
        experts=experts,
        degraded_router=degraded,
        route_prompt=route_prompt,
        summary_prompt=summary_prompt,
        train_data=write_jsonl(records, out / "train.jsonl"),
        heldout_data=write_jsonl(heldout, out / "heldout.jsonl"),
    )
