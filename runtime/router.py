"""L0 routing by constrained scoring: the answer is always one of the set's labels.

The router never generates free text. Each label's full token sequence, followed by the end
token, is scored after the prompt (route prompt, conversation, `model_id=` prefill) with the
router adapter active. A batch of conversations is scored together (`score_batch`): their
prompts in one forward pass that keeps the KV cache, then every label over that cache in a
second, short one, so a prompt that fills the context is run once, not once per label. A
label's score is the SUM of the log-probabilities of its tokens and of the end token, not
normalised by length: with the end token included the sum is the model's probability of
emitting exactly that label, which is comparable across labels of different lengths, and the
router is trained on exactly this target (see `mint.examples.train`). Length normalisation
would favour long labels whose later tokens are nearly certain once the first is chosen.

The best label wins. When scoring cannot run (a model error, non-finite scores) the set's
`default` is returned; user text can only change the scores, never the set of answers.
"""

from __future__ import annotations

import inspect
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
    """For each prompt, the sum of log-probs of each continuation after it.

    Each prompt is run once: the prompts, left-padded, in one forward pass that keeps their
    KV cache and gives each continuation's first token; the cache is then repeated once per
    continuation and only the continuations (right-padded, short) run over it. Position ids
    count real tokens only, so padding changes no real token's position. The scores equal
    those of one pass over every (prompt, continuation) row (`tests/test_router_cache.py`),
    at a fraction of the cost when the prompts are long.
    """
    import torch

    ids, mask = _left_padded(prompts, pad_id)
    conts, cont_mask = _right_padded(continuations, pad_id)
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
        use_cache=True,
        logits_to_keep=1,
    )
    first = torch.log_softmax(out.logits[:, -1].float(), dim=-1)  # (prompts, vocab)
    scores = first[:, conts[:, 0]]  # (prompts, continuations): each one's first token
    if conts.shape[1] > 1:
        n = len(continuations)
        rest = _rest_logprobs(model, _cache_of(out), mask, conts, cont_mask, n)
        scores = scores + rest.view(len(prompts), n)
    return scores.tolist()


def _left_padded(rows: list[list[int]], pad_id: int) -> tuple[Any, Any]:
    import torch

    width = max(len(r) for r in rows)
    ids, mask = (
        torch.full((len(rows), width), pad_id),
        torch.zeros(len(rows), width, dtype=torch.long),
    )
    for i, row in enumerate(rows):
        ids[i, width - len(row) :], mask[i, width - len(row) :] = torch.tensor(row), 1
    return ids, mask


def _right_padded(rows: list[list[int]], pad_id: int) -> tuple[Any, Any]:
    import torch

    width = max(len(r) for r in rows)
    ids, mask = (
        torch.full((len(rows), width), pad_id),
        torch.zeros(len(rows), width, dtype=torch.long),
    )
    for i, row in enumerate(rows):
        ids[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), 1
    return ids, mask


def _rest_logprobs(model: Any, cache: Any, mask: Any, conts: Any, cont_mask: Any, n: int):
    """Sum of log-probs of every continuation's tokens after its first, for each (prompt,
    continuation) row, prompt-major: the continuations but their last token run over the
    prompts' cache, repeated once per continuation."""
    import torch

    prompts = mask.shape[0]
    cache.batch_repeat_interleave(n)
    feed, feed_mask = conts[:, :-1].repeat(prompts, 1), cont_mask[:, :-1].repeat(prompts, 1)
    lengths = mask.sum(-1).repeat_interleave(n).unsqueeze(-1)
    logits = model(
        input_ids=feed,
        attention_mask=torch.cat([mask.repeat_interleave(n, dim=0), feed_mask], dim=-1),
        position_ids=lengths + torch.arange(feed.shape[1]),
        use_cache=True,
        **{_cache_arg(model): cache},
    ).logits
    targets = conts[:, 1:].repeat(prompts, 1)
    picked = torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1))
    return torch.where(cont_mask[:, 1:].repeat(prompts, 1).bool(), picked.squeeze(-1), 0.0).sum(-1)


def _cache_arg(model: Any) -> str:
    """The keyword a model's forward takes its KV cache by: `cache` in newer transformers,
    `past_key_values` before."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def _cache_of(output: Any) -> Any:
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def decide(labels: Sequence[str], scores: Sequence[float], default: str) -> RouteDecision:
    """Argmax over the scores; `default` when they cannot decide."""
    table = dict(zip(labels, scores))
    finite = [s for s in scores if s == s and abs(s) != float("inf")]
    if len(finite) != len(labels) or not labels:
        return RouteDecision(default, table, "scores are not finite")
    best = max(range(len(labels)), key=lambda i: scores[i])
    return RouteDecision(labels[best], table)
