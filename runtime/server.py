"""The OpenAI-compatible HTTP server over a `Runtime` (starlette + uvicorn).

Endpoints: `POST /v1/chat/completions`, `POST /v1/feedback`, `GET /v1/models`, `GET /healthz`,
`GET /metrics`.
`model` is the set's name (routed) or one of its expert labels (that expert answers, no
routing); an adapter line served alone (`mint serve chat@production`) has one name, its
line's. `LINE@REV`, the revision the server follows (as vLLM's mint plugin names a model), is
taken for the line's name too, and answered under the name asked for; `/v1/models` lists
the names. `stream: true` answers with server-sent events (see `chunks`). Requests are
submitted to the runtime's batches and awaited without holding a thread. Every refusal is an
OpenAI-style JSON error with a 4xx status; nothing a client sends can stop the server. What
a request may hold is checked before it is queued (see `requests`), and a turn that still
cannot be tokenized fails alone with a 400, never its batch (see `isolation`).

With a `TraceRecorder` on the runtime, each turn is queued as a trace under the completion id
the client receives (streamed turns too), and `POST /v1/feedback` takes `{"id", "score",
"label"?}` on it: 404 for an id no trace has, 400 for a bad body.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from mint.errors import (
    DatabaseUnavailable,
    Forbidden,
    InvalidFeedback,
    TraceNotFound,
    Unauthenticated,
)
from mint.runtime.auth import feedback_identity
from mint.runtime.chunks import (
    ChunkWriter,
    EventStream,
    completion_body,
    error_event,
    stream_events,
)
from mint.runtime.errors import EmptyConversation, EngineUnavailable, NotServing, UnknownModel
from mint.runtime.isolation import UnusableTurn
from mint.runtime.pipeline import TurnResult
from mint.runtime.requests import (  # noqa: F401 - parse_json and the rest, as before
    MAX_DEPTH,
    ApiError,
    ChatRequest,
    parse_chat,
    parse_feedback,
    parse_json,
)
from mint.runtime.runtime import Runtime
from mint.runtime.traces import TracesBusy, TracesDeferred, TracesRefused, trace_row

log = logging.getLogger("mint.runtime")

MAX_BODY = 1 << 20  # bytes

# The runtime's refusals of a request: status, OpenAI error code, type and param.
REFUSALS: dict[type[Exception], tuple[int, str, str, str | None]] = {
    UnknownModel: (404, "model_not_found", "invalid_request_error", "model"),
    EmptyConversation: (400, "empty_messages", "invalid_request_error", "messages"),
    UnusableTurn: (400, "invalid_text", "invalid_request_error", "messages"),
    NotServing: (503, "not_serving", "server_error", None),
    EngineUnavailable: (503, "engine_unavailable", "server_error", None),
    TraceNotFound: (404, "trace_not_found", "invalid_request_error", "id"),
    InvalidFeedback: (400, "invalid_feedback", "invalid_request_error", None),
    DatabaseUnavailable: (503, "database_unavailable", "server_error", None),
    TracesBusy: (503, "database_busy", "server_error", None),  # try again later
    TracesDeferred: (503, "registry_unavailable", "server_error", None),
    TracesRefused: (503, "traces_refused", "server_error", None),
    Unauthenticated: (401, "invalid_api_key", "invalid_request_error", None),
    Forbidden: (403, "permission_denied", "invalid_request_error", None),
}


def error_response(
    status: int, message: str, code: str, type_: str = "invalid_request_error", param=None
) -> JSONResponse:
    """`{"error": {"message", "type", "param", "code"}}` with `status`."""
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return JSONResponse(body, status_code=status)


async def read_body(request: Request, limit: int) -> bytes:
    """The request body; bodies over `limit` bytes are refused before they are read in full."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise ApiError(413, f"request body is larger than {limit} bytes", "request_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"request body is larger than {limit} bytes", "request_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


class _Handlers:
    """The endpoint functions, bound to one runtime."""

    def __init__(self, runtime: Runtime, max_body: int):
        self.runtime, self.max_body = runtime, max_body

    def served_name(self, model: str) -> str:
        """The name the runtime knows MODEL by: `LINE@REV`, where REV is what this server
        follows (its channel, tag or commit), is the line's own name; any other is as given."""
        line, at, rev = model.partition("@")
        engine = self.runtime.active
        if at and engine is not None and line == engine.spec.name and rev == self.runtime.variant:
            return line
        return model

    async def chat(self, request: Request) -> Response:
        chat = parse_chat(parse_json(await read_body(request, self.max_body)))
        if chat.stream:
            return self._stream(chat)
        ticket = self.runtime.submit(
            chat.messages,
            model=self.served_name(chat.model),
            max_new_tokens=chat.max_tokens,
            user=chat.user,
        )
        try:
            result = await asyncio.wrap_future(ticket.future)
        finally:
            ticket.cancel()  # a no-op once done; stops the turn if this request was dropped
        body = completion_body(chat.model, result)
        self._trace(body["id"], chat, ticket.lease.variant, result)
        return JSONResponse(body)

    def _stream(self, chat: ChatRequest) -> Response:
        """Submit a turn whose events go to an asyncio queue, and send them as they come."""
        loop, queue = asyncio.get_running_loop(), asyncio.Queue()
        writer = ChunkWriter(chat.model, chat.include_usage)
        submitted: list = []

        def done(result: TurnResult) -> None:  # on the loop, after this handler returned
            self._trace(writer.id, chat, submitted[0].lease.variant, result)

        def on_event(kind: str, value: Any) -> None:  # called from the batch's thread
            if kind == "done":
                loop.call_soon_threadsafe(done, value)
            loop.call_soon_threadsafe(queue.put_nowait, (kind, value))

        ticket = self.runtime.submit(
            chat.messages,
            model=self.served_name(chat.model),
            max_new_tokens=chat.max_tokens,
            on_event=on_event,
            user=chat.user,
        )
        submitted.append(ticket)
        return EventStream(stream_events(queue, writer, self._stream_error), ticket.cancel)

    def _trace(self, trace_id: str, chat: ChatRequest, variant: str, result: TurnResult) -> None:
        """Queue the turn's trace (a no-op without a recorder); never raises."""
        recorder = self.runtime.recorder
        if recorder is None:
            return
        try:
            row = trace_row(
                trace_id,
                result,
                variant=variant,
                messages=chat.messages,
                user=chat.user,
                content=recorder.content,
            )
            recorder.record(row)
        except Exception as exc:  # noqa: BLE001 - tracing must never fail the turn
            recorder.dropped += 1
            log.debug("tracing a turn failed: %s", exc)

    async def feedback(self, request: Request) -> Response:
        trace_id, score, label = parse_feedback(parse_json(await read_body(request, 1 << 14)))
        recorder = self.runtime.recorder
        if recorder is None or not recorder.accepts_feedback:
            raise ApiError(503, "this server records no traces", "traces_off")
        who = feedback_identity(request)  # by (and a registry token) when a token is needed
        await asyncio.to_thread(recorder.feedback, trace_id, score, label, **who)
        return JSONResponse({"ok": True})

    def _stream_error(self, exc: BaseException) -> bytes:
        """The error event ending a stream: a refusal's own code (a turn whose text cannot be
        tokenized is the client's error), else an internal error."""
        refusal = next((REFUSALS[k] for k in type(exc).__mro__ if k in REFUSALS), None)
        if refusal is None:
            self.runtime.metrics.error(500)
            return error_event(f"internal error: {type(exc).__name__}", "internal_error")
        status, code, type_, _ = refusal
        self.runtime.metrics.error(status)
        return error_event(str(exc), code, type_)

    async def models(self, request: Request) -> Response:
        with self.runtime.lease() as engine:
            spec = engine.spec
            if spec.single:  # one adapter: its line is its one name
                data = [_model_entry(spec.name, spec.id, "adapter", spec.name)]
            else:
                data = [_model_entry(spec.name, spec.id, "set", spec.name)]
                data += [
                    _model_entry(label, files.commit_id, "expert", spec.name)
                    for label, files in spec.experts.items()
                ]
        return JSONResponse({"object": "list", "data": data})

    async def healthz(self, request: Request) -> Response:
        engine = self.runtime.active
        if engine is None:
            return JSONResponse({"status": "starting", "commit": None}, status_code=503)
        metrics = self.runtime.metrics
        recorder = self.runtime.recorder
        canary = self.runtime.canary
        return JSONResponse(
            {
                "status": "ok",
                "set": engine.spec.name,
                "commit": engine.id,
                "canary": canary.id if canary is not None else None,
                "swaps": metrics.swaps,
                "failed_swaps": metrics.failed_swaps,
                "traces": recorder.stats() if recorder is not None else None,
            }
        )

    async def metrics(self, request: Request) -> Response:
        return PlainTextResponse(
            self.runtime.metrics.render(), media_type="text/plain; version=0.0.4"
        )


def _model_entry(name: str, commit: str, kind: str, owner: str) -> dict:
    return {
        "id": name,
        "object": "model",
        "created": 0,
        "owned_by": owner,
        "mint": {"kind": kind, "commit": commit},
    }


def create_app(runtime: Runtime, *, max_body: int = MAX_BODY) -> Starlette:
    """The starlette app serving `runtime`."""
    handlers = _Handlers(runtime, max_body)

    async def api_error(request: Request, exc: ApiError) -> Response:
        runtime.metrics.error(exc.status)
        return error_response(exc.status, exc.message, exc.code, param=exc.param)

    async def http_error(request: Request, exc: HTTPException) -> Response:
        runtime.metrics.error(exc.status_code)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, str(exc.detail), code)

    async def refused(request: Request, exc: Exception) -> Response:
        status, code, type_, param = next(REFUSALS[k] for k in type(exc).__mro__ if k in REFUSALS)
        runtime.metrics.error(status)
        response = error_response(status, str(exc), code, type_, param)
        if isinstance(exc, TracesDeferred):  # nothing is wrong with the request: send it again
            response.headers["Retry-After"] = "1"
        return response

    async def disconnected(request: Request, exc: ClientDisconnect) -> Response:
        return Response(status_code=499)

    async def crashed(request: Request, exc: Exception) -> Response:
        runtime.metrics.error(500)
        return error_response(
            500, f"internal error: {type(exc).__name__}", "internal_error", "server_error"
        )

    routes = [
        Route("/v1/chat/completions", handlers.chat, methods=["POST"]),
        Route("/v1/feedback", handlers.feedback, methods=["POST"]),
        Route("/v1/models", handlers.models, methods=["GET"]),
        Route("/healthz", handlers.healthz, methods=["GET"]),
        Route("/metrics", handlers.metrics, methods=["GET"]),
    ]
    errors = {
        ApiError: api_error,
        HTTPException: http_error,
        **dict.fromkeys(REFUSALS, refused),
        ClientDisconnect: disconnected,
        Exception: crashed,
    }
    return Starlette(routes=routes, exception_handlers=errors)


def serve(
    runtime: Runtime, host: str = "127.0.0.1", port: int = 8000, *, log_level: str = "info"
) -> None:
    """Serve `runtime` until SIGINT or SIGTERM (blocks); requests in flight finish first
    (see `mint.runtime.serving`, which `mint serve` runs, with its token checks)."""
    from mint.runtime.serving import serve as serve_until_stopped

    serve_until_stopped(runtime, host, port, log_level=log_level)


class ServerThread:
    """Serve a runtime from a background thread: `with ServerThread(rt) as url: ...`.

    `port=0` takes a free port; `url` tells which once started.
    """

    def __init__(
        self,
        runtime: Runtime,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        log_level: str = "warning",
    ):
        import uvicorn

        config = uvicorn.Config(
            create_app(runtime), host=host, port=port, log_level=log_level, lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, name="mint-serve", daemon=True)
        self.host = host

    def start(self, timeout: float = 30.0) -> str:
        """Start serving; returns the base URL once the socket listens."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.02)
        return self.url

    @property
    def url(self) -> str:
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://{self.host}:{port}"

    def stop(self) -> None:
        """Ask uvicorn to exit and wait for it."""
        self.server.should_exit = True
        self._thread.join()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
