"""L0 routing by constrained scoring: the answer is always one of the set's labels.

The router never generates free text. Each label's full token sequence, followed by the end
token, is appended to the prompt (route prompt, conversation, `model_id=` prefill), and all
labels are scored in one batched forward pass with the router adapter active; a batch of
conversations is routed in one pass too (`score_batch`). A label's score
is the SUM of the log-probabilities of its tokens and of the end token, not normalised by
length: with the end token included the sum is the model's probability of emitting exactly
that label, which is comparable across labels of different lengths, and the router is trained
on exactly this target (see `mint.examples.train`). Length normalisation would favour long
labels whose later tokens are nearly certain once the first is chosen.

The best label wins. When scoring cannot run (a model error, non-finite scores) the set's
`default` is returned; user text can only change the scores, never the set of answers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mint.runtime.errors import AmbiguousLabels
from mint.runtime.prompts import PREFILL, encode


@dataclass(frozen=True)
class RouteDecision:
    """The chosen label, every label's score, and why the default was used (if it was)."""

    label: str
    scores: dict[str, float]
    fallback: str | None = None

    def probs(self) -> dict[str, float]:
        """The router's probability of each label, the scores softmaxed over the labels (the
        model's probabilities of emitting each label, renormalised); {} when it fell back."""
        if self.fallback is not None or not self.scores:
            return {}
        top = max(self.scores.values())
        weights = {k: math.exp(v - top) for k, v in self.scores.items()}
        total = sum(weights.values())
        return {k: w / total for k, w in weights.items()}


def label_sequences(tokenizer: Any, labels: Sequence[str]) -> list[list[int]]:
    """Each label's token ids as they follow the prefill, plus the end token.

    Raises AmbiguousLabels when two labels come out as the same tokens.
    """
    prefix = encode(tokenizer, PREFILL)
    seen: dict[tuple[int, ...], str] = {}
    sequences = []
    for label in labels:
        full = encode(tokenizer, PREFILL + label)
        ids = full[len(prefix) :] if full[: len(prefix)] == prefix else encode(tokenizer, label)
        if not ids:
            raise AmbiguousLabels(label, "")
        if tokenizer.eos_token_id is not None:
            ids = ids + [tokenizer.eos_token_id]
        if tuple(ids) in seen:
            raise AmbiguousLabels(seen[tuple(ids)], label)
        seen[tuple(ids)] = label
        sequences.append(ids)
    return sequences


def score_continuations(
    model: Any, prompt: list[int], continuations: list[list[int]], pad_id: int
) -> list[float]:
    """Sum of log-probs of each continuation after `prompt`, in one batched forward pass."""
    return score_batch(model, [prompt], continuations, pad_id)[0]


def score_batch(
    model: Any, prompts: list[list[int]], continuations: list[list[int]], pad_id: int
) -> list[list[float]]:
    """For each prompt, the sum of log-probs of each continuation after it: one forward pass
    over every (prompt, continuation) pair.

    Prompts are left-padded and continuations right-padded, so every continuation starts at
    the same column and the logits needed are the same last columns for every row; position
    ids count real tokens only, so padding changes no real token's position.
    """
    import torch

    start, width = max(len(p) for p in prompts), max(len(c) for c in continuations)
    ids = torch.full((len(prompts) * len(continuations), start + width), pad_id)
    mask = torch.zeros_like(ids)
    for row, (prompt, cont) in enumerate((p, c) for p in prompts for c in continuations):
        ids[row, start - len(prompt) : start + len(cont)] = torch.tensor(prompt + cont)
        mask[row, start - len(prompt) : start + len(cont)] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    # logits at columns start-1 .. start+width-2 predict the continuation tokens
    logits = model(
        input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=width + 1
    ).logits
    logprobs = torch.log_softmax(logits[:, :width].float(), dim=-1)
    picked = logprobs.gather(-1, ids[:, start:].unsqueeze(-1)).squeeze(-1)
    scores = torch.where(mask[:, start:].bool(), picked, 0.0).sum(-1).tolist()
    n = len(continuations)
    return [scores[i * n : (i + 1) * n] for i in range(len(prompts))]


def decide(labels: Sequence[str], scores: Sequence[float], default: str) -> RouteDecision:
    """Argmax over the scores; `default` when they cannot decide."""
    table = dict(zip(labels, scores))
    finite = [s for s in scores if s == s and abs(s) != float("inf")]
    if len(finite) != len(labels) or not labels:
        return RouteDecision(default, table, "scores are not finite")
    best = max(range(len(labels)), key=lambda i: scores[i])
    return RouteDecision(labels[best], table)
