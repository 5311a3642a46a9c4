"""OpenAI's response objects for a turn: `chat.completion`, and `chat.completion.chunk`s sent as
server-sent events when the request streams.

A stream is: a first chunk with the role (and mint's routing fields, the route stage having
run), one chunk per content delta, a chunk with `finish_reason` (and the rest of mint's
fields: the summary, latencies), a chunk with `usage` and no choices when the request asked
for `stream_options.include_usage`, then `data: [DONE]`. An error after the stream started
is sent as a `data: {"error": ...}` event, as OpenAI does.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from mint.runtime.pipeline import TurnResult

DONE = b"data: [DONE]\n\n"


def usage_of(result: TurnResult) -> dict:
    return {
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "total_tokens": result.prompt_tokens + result.completion_tokens,
    }


def mint_fields(result: TurnResult) -> dict:
    """mint's own `mint` field of a response: route, set, summary, latencies, batch size."""
    return {
        "route": result.route,
        "set": result.set_id,
        "set_name": result.set_name,
        "summary": result.summary,
        "direct": result.direct,
        "route_fallback": result.route_fallback,
        "batch": result.batch,
        "latency_ms": {k: round(v * 1000, 3) for k, v in result.latency.items()},
    }


def completion_body(model: str, result: TurnResult) -> dict:
    """The OpenAI chat.completion object for one turn, with mint's own `mint` field."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result.answer},
                "finish_reason": result.finish_reason,
                "logprobs": None,
            }
        ],
        "usage": usage_of(result),
        "mint": mint_fields(result),
    }


class ChunkWriter:
    """The server-sent events of one streamed completion (one id, one creation time)."""

    def __init__(self, model: str, include_usage: bool):
        self.model, self.include_usage = model, include_usage
        self.id, self.created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

    def chunk(self, delta: dict | None, finish: str | None = None, **extra: Any) -> bytes:
        """One `chat.completion.chunk` event; `delta=None` gives a chunk without choices."""
        body: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
        }
        if delta is not None:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            body["choices"].append(choice)
        if self.include_usage:
            body["usage"] = None
        body.update(extra)
        return event(body)

    def first(self, fields: dict) -> bytes:
        return self.chunk({"role": "assistant", "content": ""}, mint=fields)

    def text(self, delta: str) -> bytes:
        return self.chunk({"content": delta})

    def last(self, result: TurnResult) -> list[bytes]:
        """The finish chunk, the usage chunk when asked for, and `[DONE]`."""
        out = [self.chunk({}, result.finish_reason, mint=mint_fields(result))]
        if self.include_usage:
            out.append(self.chunk(None, usage=usage_of(result)))
        return out + [DONE]


def event(body: dict) -> bytes:
    """`data: JSON` and the blank line that ends a server-sent event."""
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def error_event(message: str, code: str, type_: str = "server_error") -> bytes:
    return event({"error": {"message": message, "type": type_, "param": None, "code": code}})


async def stream_events(
    queue: asyncio.Queue, writer: ChunkWriter, on_error: Callable[[BaseException], bytes]
) -> AsyncIterator[bytes]:
    """The events of a turn, as the runtime's `(kind, value)` events arrive on `queue`."""
    while True:
        kind, value = await queue.get()
        if kind == "route":
            yield writer.first(value)
        elif kind == "text":
            yield writer.text(value)
        elif kind == "done":
            for chunk in writer.last(value):
                yield chunk
            return
        elif kind == "error":
            yield on_error(value)
            return
        else:  # cancelled: nobody is listening any more
            return


class EventStream(StreamingResponse):
    """A `text/event-stream` response that calls `on_close()` however it ends, a client that
    went away included, so that the turn behind it stops and frees its place."""

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], None]):
        headers = {"cache-control": "no-cache", "x-accel-buffering": "no"}
        super().__init__(content, media_type="text/event-stream", headers=headers)
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.on_close()
