"""Reading and checking the requests `mint serve` takes, before anything reaches a batch.

Every refusal is an `ApiError`: a 4xx status and the OpenAI error fields, `param` naming
what was wrong (`messages[0].content`, `temperature`). `parse_json` refuses what no field may
hold, wherever it is: text that is not valid Unicode (a lone surrogate, which a JSON `\\ud800`
escape can produce and no tokenizer takes) or holds NUL, numbers that are not finite
(`NaN`, `1e400`) and integers too long to be anything but an attack on `int()`.
`parse_chat` then checks the chat fields, and refuses with a 400 naming it every OpenAI
parameter that mint cannot honour (`n` > 1, `tools`, `stop`...) rather than ignoring it, as
OpenAI's API does for what it does not support.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from mint.exchange.received import UNSTORABLE_TEXT
from mint.runtime.traces import MAX_USER

MAX_DEPTH = 64  # levels of nested arrays and objects; a chat request needs about six
MAX_INT_DIGITS = 20  # past int64; `int()` of thousands of digits is quadratic (and refused)
MAX_NEW_TOKENS = 256
DEFAULT_NEW_TOKENS = 32
ROLES = {"system", "user", "assistant", "developer", "tool"}


class ApiError(Exception):
    """A request the server refuses, with the OpenAI error fields."""

    def __init__(self, status: int, message: str, code: str, *, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param


class _Unusable:
    """Stands, in a parsed body, for a number no field may hold (see `parse_json`)."""

    def __init__(self, text: str):
        self.text = text


def _parse_int(text: str) -> int | _Unusable:
    return _Unusable(text) if len(text.lstrip("-")) > MAX_INT_DIGITS else int(text)


def _parse_float(text: str) -> float | _Unusable:
    value = float(text)
    return value if math.isfinite(value) else _Unusable(text)


def parse_json(body: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """`body` parsed as JSON; a 400 for nesting deeper than `max_depth`, bad text or numbers."""
    too_deep = ApiError(400, f"request body nests deeper than {max_depth} levels", "too_deep")
    try:
        value = json.loads(
            body, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_Unusable
        )
    except RecursionError:  # the parser recurses once per level
        raise too_deep from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise ApiError(400, f"request body is not valid JSON: {exc}", "invalid_json") from None
    if nesting_depth(value, max_depth) > max_depth:
        raise too_deep
    check_values(value)
    return value


def nesting_depth(value: Any, stop: int) -> int:
    """How deep arrays and objects nest in `value` (1 for `[]`), counting no further than
    `stop + 1`; without recursion, so that no depth can exhaust the stack."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > stop:
            return deepest
        pending.extend((child, depth + 1) for child in children)
    return deepest


def check_values(value: Any) -> None:
    """A 400 naming the first string (key or value) that holds NUL or a lone surrogate, or
    the first number that is not finite or has too many digits, anywhere in `value`."""
    pending: list[tuple[Any, tuple]] = [(value, ())]
    while pending:
        item, trail = pending.pop()
        if isinstance(item, str):
            found = UNSTORABLE_TEXT.search(item)
            if found:
                raise _bad_text(trail, found.group())
        elif isinstance(item, _Unusable):
            message = f"`{_path(trail)}` is not a finite number of at most {MAX_INT_DIGITS} digits"
            raise ApiError(400, message, "invalid_number", param=_path(trail))
        elif isinstance(item, dict):
            for key, child in item.items():
                if UNSTORABLE_TEXT.search(key):
                    message = f"a key of `{_path(trail)}` is not valid text (NUL or a surrogate)"
                    raise ApiError(400, message, "invalid_text", param=_path(trail))
                pending.append((child, (*trail, key)))
        elif isinstance(item, list):
            pending.extend((child, (*trail, i)) for i, child in enumerate(item))


def _bad_text(trail: tuple, char: str) -> ApiError:
    what = "a NUL character" if char == "\x00" else f"a lone surrogate (U+{ord(char):04X})"
    message = f"`{_path(trail)}` is not valid text: it holds {what}"
    return ApiError(400, message, "invalid_text", param=_path(trail))


def _path(trail: tuple) -> str:
    """`messages[0].content` for ("messages", 0, "content"); odd keys shown as `ascii()`."""
    out = ""
    for step in trail:
        if isinstance(step, int):
            out += f"[{step}]"
        else:
            name = step if step.isidentifier() and len(step) <= 64 else ascii(step[:64])
            out += f".{name}" if out else name
    return out or "body"


@dataclass(frozen=True)
class ChatRequest:
    """The fields of a chat completion request that mint uses."""

    model: str
    messages: list[dict]
    max_tokens: int
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage
    user: str | None = None  # the caller's end user: traced, and sticky in a canary split


def parse_chat(body: Any) -> ChatRequest:
    """Validate a chat completion request body; raises ApiError (400) on anything malformed."""
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object", "invalid_request")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        message = "`model` is required and must be a string"
        raise ApiError(400, message, "missing_model", param="model")
    check_parameters(body)
    stream, include_usage = _stream_options(body)
    messages = _messages(body.get("messages"))
    user = body.get("user")
    if user is not None and (not isinstance(user, str) or len(user) > MAX_USER):
        message = f"`user` must be a string of at most {MAX_USER} characters"
        raise ApiError(400, message, "invalid_user", param="user")
    return ChatRequest(model, messages, _max_tokens(body), stream, include_usage, user or None)


def parse_feedback(body: Any) -> tuple[str, Any, Any]:
    """(id, score, label) of a feedback body; the score and label are checked by the store."""
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object", "invalid_request")
    trace_id = body.get("id")
    if not isinstance(trace_id, str) or not trace_id or len(trace_id) > 64:
        raise ApiError(400, "`id` must be a completion id", "invalid_feedback", param="id")
    if "score" not in body:
        raise ApiError(400, "`score` is required", "invalid_feedback", param="score")
    return trace_id, body["score"], body.get("label")


# OpenAI parameters mint cannot honour, with the values that ask for nothing (accepted).
UNSUPPORTED: dict[str, tuple] = {
    "tools": (None, []),
    "functions": (None, []),
    "tool_choice": (None, "none"),
    "function_call": (None, "none"),
    "stop": (None, "", []),
    "logprobs": (None, False),
    "top_logprobs": (None,),
    "logit_bias": (None, {}),
    "response_format": (None, {"type": "text"}),
    "audio": (None,),
    "modalities": (None, ["text"]),
}
# Sampling parameters: accepted in OpenAI's ranges and ignored, since decoding is greedy.
RANGES = {
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "presence_penalty": (-2.0, 2.0),
    "frequency_penalty": (-2.0, 2.0),
}


def check_parameters(body: dict) -> None:
    """A 400 naming the first parameter mint cannot honour or whose value is out of range."""
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ApiError(400, "`n` must be a positive integer", "invalid_n", param="n")
    if n is not None and n > 1:
        message = "`n` > 1 is not supported: this server returns one choice"
        raise ApiError(400, message, "unsupported_parameter", param="n")
    for name, accepted in UNSUPPORTED.items():
        if name in body and not any(_same(body[name], ok) for ok in accepted):
            message = f"`{name}` is not supported by this server"
            raise ApiError(400, message, "unsupported_parameter", param=name)
    for name, (low, high) in RANGES.items():
        value = body.get(name)
        if value is None:
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or not low <= value <= high:
            message = f"`{name}` must be a number from {low:g} to {high:g}"
            raise ApiError(400, message, f"invalid_{name}", param=name)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ApiError(400, "`seed` must be an integer", "invalid_seed", param="seed")


def _same(value: Any, accepted: Any) -> bool:
    """`value == accepted`, without `True == 1` or `False == 0` counting as the same."""
    return type(value) is type(accepted) and value == accepted


def _stream_options(body: dict) -> tuple[bool, bool]:
    """(stream, include_usage) of a request; a 400 for values of the wrong type."""
    stream, options = body.get("stream", False), body.get("stream_options")
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise ApiError(400, "`stream` must be a boolean", "invalid_stream", param="stream")
    if options is not None and (
        not isinstance(options, dict)
        or not isinstance(options.get("include_usage", False), (bool, type(None)))
    ):
        message = "`stream_options` must be an object whose include_usage is a boolean"
        raise ApiError(400, message, "invalid_stream_options", param="stream_options")
    return stream, bool(stream and options and options.get("include_usage"))


def _messages(messages: Any) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        message = "`messages` must be a non-empty list"
        raise ApiError(400, message, "empty_messages", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _bad_message(f"messages[{i}]", "must be an object")
        role = message.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise _bad_message(f"messages[{i}].role", f"must be one of {sorted(ROLES)}")
        _content(message.get("content"), f"messages[{i}].content")
    if not any(m["role"] == "user" and m.get("content") for m in messages):
        raise ApiError(
            400, "`messages` has no user message to answer", "empty_messages", param="messages"
        )
    return messages


def _content(content: Any, where: str) -> None:
    """A string, null, or a list of text parts (`{"type": "text", "text": STRING}`): mint's
    models read text only, so an image or audio part is refused rather than dropped."""
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise _bad_message(where, "must be a string or a list of parts")
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text":
            raise _bad_message(f"{where}[{j}]", 'must be a part of type "text"')
        if not isinstance(part.get("text"), str):
            raise _bad_message(f"{where}[{j}].text", "must be a string")


def _bad_message(param: str, why: str) -> ApiError:
    return ApiError(400, f"`{param}` {why}", "invalid_messages", param=param)


def _max_tokens(body: dict) -> int:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    if value is None:
        return DEFAULT_NEW_TOKENS
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_NEW_TOKENS:
        message = f"`max_tokens` must be an integer from 1 to {MAX_NEW_TOKENS}"
        raise ApiError(400, message, "invalid_max_tokens", param="max_tokens")
    return value
