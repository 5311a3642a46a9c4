"""The router scores each prompt once and the labels over its KV cache (issue 19, item 15).

`score_batch` used to run one full-length row per (prompt, label) pair: with four labels a
prompt that fills the context cost four times its length in one forward pass, and small chats
waited behind it. It now runs each prompt once and only the labels over the prompt's cache.
These tests hold the new scoring to the old one (kept here as the reference) on a real tiny
Llama with a real LoRA adapter active, with left padding and labels of different lengths.
"""

from __future__ import annotations

import pytest
import torch

from mint.runtime.loader import SharedBase, adapter_name
from mint.runtime.router import score_batch, score_continuations

from support.runtime import adapter_files


def score_rows(model, prompts, continuations, pad_id):
    """The former scoring: one forward pass over every (prompt, continuation) row, prompts
    left-padded, continuations right-padded."""
    start, width = max(len(p) for p in prompts), max(len(c) for c in continuations)
    ids = torch.full((len(prompts) * len(continuations), start + width), pad_id)
    mask = torch.zeros_like(ids)
    for row, (prompt, cont) in enumerate((p, c) for p in prompts for c in continuations):
        ids[row, start - len(prompt) : start + len(cont)] = torch.tensor(prompt + cont)
        mask[row, start - len(prompt) : start + len(cont)] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(
        input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=width + 1
    ).logits
    logprobs = torch.log_softmax(logits[:, :width].float(), dim=-1)
    picked = logprobs.gather(-1, ids[:, start:].unsqueeze(-1)).squeeze(-1)
    scores = torch.where(mask[:, start:].bool(), picked, 0.0).sum(-1).tolist()
    n = len(continuations)
    return [scores[i * n : (i + 1) * n] for i in range(len(prompts))]


@pytest.fixture(scope="module")
def router(models):
    """The tiny base with one random LoRA adapter injected and active, as the runtime holds
    the router: (model context, pad id, vocabulary size)."""
    base = SharedBase.load(models["base"])
    files = adapter_files(models["a1"])
    assert base.acquire([base.prepare(files)], [adapter_name(files.commit_id)])
    return base, adapter_name(files.commit_id)


def prompts_of(lengths, vocab, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in lengths]


@pytest.mark.parametrize(
    "lengths", [[7], [5, 40, 1, 23], [120, 3]], ids=["one", "mixed", "long-and-short"]
)
def test_scores_over_the_cache_equal_the_full_rows(router, lengths):
    base, name = router
    pad, vocab = base.tokenizer.pad_token_id, base.config.vocab_size
    prompts = prompts_of(lengths, vocab)
    labels = [[11, 4, 2], [11, 9, 30, 2], [17, 2], [40]]  # shared first token; 1 to 4 tokens
    with base.using(name) as model:
        new = score_batch(model, prompts, labels, pad)
        old = score_rows(model, prompts, labels, pad)
        alone = [score_rows(model, [p], labels, pad)[0] for p in prompts]
    assert len(new) == len(prompts) and all(len(row) == len(labels) for row in new)
    for got, want, single in zip(new, old, alone):
        assert got == pytest.approx(want, abs=1e-4)
        assert got == pytest.approx(single, abs=1e-4)  # padding changes nothing
    assert all(len({round(s, 3) for s in row}) == len(labels) for row in new)  # not all alike
    assert len({tuple(round(s, 3) for s in row) for row in new}) == len(prompts)


def test_single_token_labels_need_no_second_pass(router):
    base, name = router
    pad, vocab = base.tokenizer.pad_token_id, base.config.vocab_size
    prompts, labels = prompts_of([9, 2], vocab, seed=1), [[5], [6], [7]]
    with base.using(name) as model:
        new = score_batch(model, prompts, labels, pad)
        old = score_rows(model, prompts, labels, pad)
        one = score_continuations(model, prompts[0], labels, pad)
    for got, want in zip(new, old):
        assert got == pytest.approx(want, abs=1e-4)
    assert one == pytest.approx(old[0], abs=1e-4)


def test_each_prompt_runs_once_whatever_the_number_of_labels(router):
    """The work that grows with a prompt's length is done once per prompt, not once per
    label: the model embeds each padded prompt once, then only the labels' tokens."""
    base, name = router
    pad, vocab = base.tokenizer.pad_token_id, base.config.vocab_size
    prompts = prompts_of([200, 150], vocab, seed=2)
    labels = [[11, 4, 2], [11, 9, 30, 2], [17, 2], [40, 2]]
    seen: list[int] = []
    with base.using(name) as model:
        embed = model.get_input_embeddings()
        hook = embed.register_forward_hook(lambda _m, args, _out: seen.append(args[0].numel()))
        try:
            score_batch(model, prompts, labels, pad)
        finally:
            hook.remove()
    width = max(len(label) for label in labels)
    assert sum(seen) == len(prompts) * 200 + len(prompts) * len(labels) * (width - 1)
