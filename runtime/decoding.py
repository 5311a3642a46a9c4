"""Greedy decoding of many rows at once, each with its own adapter, its text streamed as it grows.

`generate_rows(base, rows)` runs the rows together: one `generate` call per group, prompts
left-padded, and PEFT's mixed-adapter batch (`adapter_names=`, one name per row) when the
rows use different adapters. Each row stops at the end token, at its own token limit, or when
its caller cancels it. Greedy decoding picks the same tokens for a row whether it runs alone
or beside others (the logits differ only by floating-point rounding).

Rows are grouped so that the longest prompt plus the largest token limit of a group fits the
base's positions: every row is then decoded from the same prompt it would have alone.
`generate_each` is the same, except that a group whose call fails is decoded again row by
row, so that one row that cannot be decoded fails alone (its exception in its place).

`TextStream` turns a row's tokens into text deltas. It decodes cumulatively, holds back an
incomplete UTF-8 character (decoded as U+FFFD) and trailing whitespace, and drops leading
whitespace, so that the deltas joined are exactly the row's final text, which is stripped.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("mint.runtime")

REPLACEMENT = "\ufffd"  # what a tokenizer decodes an incomplete UTF-8 sequence to


def _never() -> bool:
    return False


@dataclass(frozen=True)
class Generation:
    """Greedy output of one row: text, token counts and why it stopped."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" (end token), "length" (token limit) or "cancelled"


@dataclass(frozen=True)
class GenRow:
    """One sequence to decode: its adapter, its prompt's ids, its limit and the caller's hooks.

    `on_text(delta)` receives the text as it grows (the deltas joined equal the final text);
    `cancelled()` returning True stops the row at the next step."""

    adapter: str
    prompt: list[int]
    max_new_tokens: int
    on_text: Callable[[str], None] | None = None
    cancelled: Callable[[], bool] = _never


class TextStream:
    """Text deltas of a growing token sequence, whose concatenation is the final stripped text."""

    def __init__(self, tokenizer: Any, sink: Callable[[str], None]):
        self.tokenizer, self.sink = tokenizer, sink
        self.ids: list[int] = []
        self.sent = ""

    def push(self, token: int) -> None:
        """Add one token; send whatever text is now certain."""
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True).lstrip()
        ready = text.rstrip()
        while ready.endswith(REPLACEMENT):  # an incomplete character: wait for its other bytes
            ready = ready[: -len(REPLACEMENT)].rstrip()
        self._send(ready)

    def close(self, text: str) -> None:
        """Send the rest of the final text (`decode(ids).strip()`)."""
        if not text.startswith(self.sent):
            log.warning("streamed text %r is not a prefix of the answer %r", self.sent, text)
        self._send(text)

    def _send(self, ready: str) -> None:
        if len(ready) > len(self.sent) and ready.startswith(self.sent):
            delta, self.sent = ready[len(self.sent) :], ready
            self.sink(delta)


def finish_row(tokenizer: Any, row: GenRow, new: list[int], made: int | None) -> Generation:
    """The Generation of a row from the tokens generated after its prompt.

    `made` is how many tokens the row had when its limit or cancellation stopped it (None if
    only the end token did); later positions hold padding."""
    eos = tokenizer.eos_token_id
    new = new[: min(made if made is not None else len(new), row.max_new_tokens)]
    if eos in new:
        new = new[: new.index(eos) + 1]
    if bool(new) and new[-1] == eos:
        reason = "stop"
    else:
        reason = "cancelled" if row.cancelled() else "length"
    text = tokenizer.decode(new, skip_special_tokens=True).strip()
    return Generation(text, len(row.prompt), len(new), reason)


def group_rows(rows: Sequence[GenRow], max_positions: int) -> list[list[int]]:
    """Indices of rows that can share one `generate` call, in order: in each group the longest
    prompt plus the largest token limit fits in `max_positions`."""
    groups: list[list[int]] = []
    sizes: list[tuple[int, int]] = []  # (longest prompt, largest limit) of each group
    for i, row in enumerate(rows):
        for g, (prompt, limit) in enumerate(sizes):
            wider = (max(prompt, len(row.prompt)), max(limit, row.max_new_tokens))
            if sum(wider) <= max_positions:
                groups[g].append(i)
                sizes[g] = wider
                break
        else:
            groups.append([i])
            sizes.append((len(row.prompt), row.max_new_tokens))
    return groups


def generate_rows(base: Any, rows: Sequence[GenRow]) -> list[Generation]:
    """Greedy decoding of every row on `base` (a SharedBase), batched; results in row order."""
    results: list[Generation | None] = [None] * len(rows)
    for group in group_rows(rows, base.max_positions):
        for i, generation in zip(group, _generate_group(base, [rows[i] for i in group])):
            results[i] = generation
    return results  # type: ignore[return-value]


def generate_each(
    base: Any, rows: Sequence[GenRow], between: Callable[[], bool] | None = None
) -> list[Generation | Exception]:
    """`generate_rows`, where a row that fails takes no other row with it: a group whose
    decoding call raised is decoded again row by row, and a row that fails alone gets its
    exception in its place. A streaming row's text is not sent twice by the retry.

    `between()`, when given, is called after each decoding step of a group whose rows share
    one adapter (the scheduler runs waiting short turns there, on this thread; it returns
    whether it ran anything, and then this group's adapter is made active again). A
    mixed-adapter group never pauses: PEFT's per-row hooks would catch the other calls."""
    rows = [
        dataclasses.replace(r, on_text=_Resumable(r.on_text)) if r.on_text else r for r in rows
    ]
    results: list[Generation | Exception | None] = [None] * len(rows)
    for group in group_rows(rows, base.max_positions):
        try:
            out = _generate_group(base, [rows[i] for i in group], between)
        except Exception as exc:  # noqa: BLE001 - retried alone below, or the row's own error
            if len(group) == 1:
                results[group[0]] = exc
                continue
            log.warning("decoding %d rows together failed (%s); one at a time", len(group), exc)
            out = [_alone(base, rows[i]) for i in group]
        for i, generation in zip(group, out):
            results[i] = generation
    return results  # type: ignore[return-value]


def _alone(base: Any, row: GenRow) -> Generation | Exception:
    if isinstance(row.on_text, _Resumable):
        row.on_text.restart()
    try:
        return _generate_group(base, [row])[0]
    except Exception as exc:  # noqa: BLE001 - this row's error, given back in its place
        return exc


class _Resumable:
    """A row's text sink that can start over: what a retry streams again is not sent twice."""

    def __init__(self, sink: Callable[[str], None]):
        self.sink, self.sent, self.seen = sink, 0, 0

    def __call__(self, delta: str) -> None:
        start, self.seen = self.seen, self.seen + len(delta)
        new = delta[max(self.sent - start, 0) :]
        if new:
            self.sent += len(new)
            self.sink(new)

    def restart(self) -> None:
        self.seen = 0


def left_padded(prompts: Sequence[list[int]], pad_id: int) -> tuple[Any, Any]:
    """(input_ids, attention_mask) with every prompt ending at the last column."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    return ids, mask


def _generate_group(
    base: Any, rows: Sequence[GenRow], between: Callable[[], bool] | None = None
) -> list[Generation]:
    from transformers import GenerationConfig

    tok = base.tokenizer
    ids, mask = left_padded([r.prompt for r in rows], tok.pad_token_id)
    width = ids.shape[1]
    adapters = [r.adapter for r in rows]
    mixed = {"adapter_names": adapters} if len(set(adapters)) > 1 else {}

    def pause() -> None:
        if between is not None and between():  # others ran on this thread, other adapters
            model.set_adapter(adapters[0])

    limits = _limits(rows, width, None if between is None or mixed else pause)
    streamer = _streamer(tok, rows)
    config = GenerationConfig(
        max_new_tokens=max(r.max_new_tokens for r in rows),
        do_sample=False,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    with base.using(adapters[0]) as model:
        try:
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                generation_config=config,
                stopping_criteria=[limits],
                streamer=streamer,
                **mixed,
            )
        except BaseException:
            if mixed:
                drop_adapter_hooks(model)
            raise
    results = []
    for i, row in enumerate(rows):
        generation = finish_row(tok, row, out[i, width:].tolist(), limits.made[i])
        if streamer is not None and streamer.streams[i] is not None:
            if generation.finish_reason != "cancelled":
                streamer.streams[i].close(generation.text)
        results.append(generation)
    return results


def drop_adapter_hooks(model: Any) -> None:
    """Remove the per-row adapter hooks PEFT's mixed-batch `generate` leaves behind when it
    raises: it removes them only when it returns, and a leftover hook would make every later
    call fail (its row count no longer matches)."""
    for module in model.modules():
        hooks = module._forward_pre_hooks
        for key, hook in list(hooks.items()):
            if isinstance(hook, functools.partial) and "adapter_names" in hook.keywords:
                del hooks[key]
                module._forward_pre_hooks_with_kwargs.pop(key, None)


def _limits(rows: Sequence[GenRow], start: int, pause: Callable[[], None] | None = None):
    """A stopping criterion that ends each row at its own limit or when it is cancelled, and
    calls `pause()` after each step that leaves a row going."""
    import torch
    from transformers import StoppingCriteria

    class RowLimits(StoppingCriteria):
        def __init__(self):
            self.made: list[int | None] = [None] * len(rows)

        def __call__(self, input_ids, scores, **kwargs):
            made = input_ids.shape[1] - start
            for i, row in enumerate(rows):
                if self.made[i] is None and (made >= row.max_new_tokens or row.cancelled()):
                    self.made[i] = made
            done = [m is not None for m in self.made]
            if pause is not None and not all(done):
                pause()
            return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    return RowLimits()


def _streamer(tokenizer: Any, rows: Sequence[GenRow]):
    """A generate() streamer that feeds each row's tokens to its TextStream; None if no row
    streams."""
    if not any(r.on_text for r in rows):
        return None
    from transformers.generation.streamers import BaseStreamer

    eos = tokenizer.eos_token_id

    class RowStreams(BaseStreamer):
        def __init__(self):
            self.streams = [TextStream(tokenizer, r.on_text) if r.on_text else None for r in rows]
            self.counts = [0] * len(rows)
            self.open = [s is not None for s in self.streams]
            self.prompt_seen = False

        def put(self, value):
            if not self.prompt_seen:  # generate() hands over the prompt first
                self.prompt_seen = True
                return
            for i, token in enumerate(value.reshape(-1).tolist()):
                if not self.open[i] or rows[i].cancelled() or token == eos:
                    self.open[i] = False
                    continue
                self.counts[i] += 1
                self.streams[i].push(token)
                self.open[i] = self.counts[i] < rows[i].max_new_tokens

        def end(self):
            pass

    return RowStreams()
