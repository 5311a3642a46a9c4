"""The text each stage sees, and how it becomes tokens. Training and serving share these.

A conversation is a list of OpenAI-style messages: `{"role": ..., "content": ...}`. An
assistant message may also carry `"mint": {"route": LABEL, "summary": TEXT}`, as the server
returns it; that is how the pipeline knows which expert wrote an earlier turn.

Prompts are plain text, one `role: content` line per message, so that they work with a
tokenizer that has no chat template (the tiny base has none).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from mint.sets.mol import PREFILL  # the protocol's prefill, shared with the vLLM export

ANSWER_CUE = "assistant:"
SUMMARY_CUE = "summary:"


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or OpenAI content parts of type text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        ]
        return " ".join(str(p) for p in parts)
    return str(content)


def render(messages: Sequence[dict]) -> str:
    """One `role: content` line per message."""
    return "\n".join(f"{m.get('role', 'user')}: {text_of(m.get('content'))}" for m in messages)


def turn_route(message: dict) -> str | None:
    """The expert that wrote an assistant message, when the message says so."""
    meta = message.get("mint")
    return meta.get("route") if isinstance(meta, dict) else None


def turn_summary(message: dict) -> str | None:
    """The summary of an assistant message, when the message carries one."""
    meta = message.get("mint")
    summary = meta.get("summary") if isinstance(meta, dict) else None
    return summary if isinstance(summary, str) and summary else None


def view_for(messages: Sequence[dict], label: str | None) -> list[dict]:
    """The conversation as expert `label` sees it: its own turns verbatim, others' as summaries.

    With `label=None` (the router's view) every summarised assistant turn is shown as its
    summary. Turns that do not say who wrote them are shown verbatim to everyone.
    """
    out = []
    for message in messages:
        summary = turn_summary(message)
        if message.get("role") == "assistant" and summary and turn_route(message) != label:
            out.append({"role": "assistant", "content": summary})
        else:
            out.append(
                {"role": message.get("role", "user"), "content": text_of(message.get("content"))}
            )
    return out


def route_text(route_prompt: str, messages: Sequence[dict]) -> tuple[str, str]:
    """(head, body) of the router's prompt; the body ends with the `model_id=` prefill."""
    return route_prompt.strip() + "\n", f"{render(view_for(messages, None))}\nassistant: {PREFILL}"


def answer_text(messages: Sequence[dict], label: str) -> tuple[str, str]:
    """(head, body) of an expert's prompt: its view of the conversation, then its cue."""
    return "", f"{render(view_for(messages, label))}\n{ANSWER_CUE}"


def summary_text(summary_prompt: str, user: str, answer: str) -> tuple[str, str]:
    """(head, body) of the summary prompt for one turn."""
    return summary_prompt.strip() + "\n", f"user: {user}\nassistant: {answer}\n{SUMMARY_CUE}"


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of `text`, without special tokens."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_prompt(tokenizer: Any, head: str, body: str, budget: int) -> list[int]:
    """BOS + head + body in at most `budget` tokens, cutting the oldest part of the body."""
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    head_ids = (bos + encode(tokenizer, head) if head else bos)[: max(budget // 2, 1)]
    room = max(budget - len(head_ids), 1)
    return head_ids + encode_tail(tokenizer, body, room)


def encode_tail(tokenizer: Any, text: str, room: int) -> list[int]:
    """The last `room` token ids of `text`, tokenizing only as much of its end as they need.

    A prompt may be a megabyte, and tokenizing all of it to keep its last few hundred tokens
    made one client's long prompts slow every batch. So the end of the text is tokenized,
    from `CHARS_GUESS` characters a token, twice as much each time too few tokens came out,
    up to the most characters a token can hold (`max_token_chars`). The first tokens of a
    cut piece may be part of a word cut in two; TAIL_MARGIN more than `room` are taken so
    that those are the ones dropped.
    """
    want = room + TAIL_MARGIN
    most = want * max_token_chars(tokenizer)
    chars = min(want * CHARS_GUESS, most)
    while len(text) > chars:
        ids = encode(tokenizer, text[-chars:])
        if len(ids) >= want or chars >= most:
            return ids[-room:]
        chars = min(chars * 2, most)
    return encode(tokenizer, text)[-room:]


TAIL_MARGIN = 8  # tokens
CHARS_GUESS = 4  # characters a token, about, in most text
_TOKEN_CHARS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def max_token_chars(tokenizer: Any) -> int:
    """The most characters of text one token of `tokenizer` stands for: the longest entry of
    its vocabulary (a byte-level or sentencepiece entry has a character per byte or more of
    text), 64 when the tokenizer shows none. An unknown-word token may stand for more: a
    text of such words is cut to fewer tokens than would fit, never more."""
    try:
        return _TOKEN_CHARS[tokenizer]
    except (KeyError, TypeError):
        pass
    try:
        longest = max((len(t) for t in tokenizer.get_vocab()), default=0) or 64
    except Exception:  # noqa: BLE001 - a tokenizer without a vocabulary to show
        longest = 64
    try:
        _TOKEN_CHARS[tokenizer] = longest
    except TypeError:  # not weakly referable: computed each time
        pass
    return longest


def last_user(messages: Sequence[dict]) -> str:
    """The text of the last user message ('' when there is none)."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return text_of(message.get("content"))
    return ""
