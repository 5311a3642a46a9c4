"""Serving the registry over HTTP/1.1: uvicorn, with deadlines on slow clients and a cap on
open connections.

uvicorn's HTTP/1.1 protocol (h11) waits forever for a request's head once its first byte has
come, and for the rest of a body: anyone who can open a socket (no token needed) holds a
connection, a task and, for an upload, a temp file for as long as they like. `Protocol` adds
three watches to each connection:

- the head: a request's head (its request line and headers) must be complete within the
  request timeout of its first byte (or of the connection's start); otherwise the connection
  is closed, with a 408 when part of a head had come;
- the body: while a request's body is incomplete, every request timeout's window must bring
  at least `MIN_BODY_BYTES` of it, unless the application is not reading it (reads paused:
  the wait is then the application's, not the client's); otherwise the request is answered
  408 when no response has started, and the connection is closed. The application sees the
  client gone (`http.disconnect`), as when a client hangs up: an upload stores nothing;
- the response: a client that reads none of it for a request timeout (the socket's buffers
  full, writes paused all that time) is cut off, as when it hangs up.

A response may send a file's bytes as its body with the kernel's sendfile (zero-copy): the
scope's extension `mint.sendfile` is a coroutine `(file, offset, count)` that sends them on
the connection (`blob_send.FileSpan` uses it for stored blobs). The same deadline holds: a
client that takes none of them for a request timeout is cut off.

A connection beyond `Limits.connections` open at once is answered 503 (JSON, with
Retry-After) and closed. Idle kept-alive connections are closed after uvicorn's keep-alive
timeout (5 s) as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import threading

import h11
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.main import STARTUP_FAILURE
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import Server

from mint.registry.failures import error_response
from mint.registry.limits import Limits

log = logging.getLogger("uvicorn.error")  # beside uvicorn's own lines about connections

MIN_BODY_BYTES = 1024  # of a body, in each request timeout's window (a stall is less)
KEEP_ALIVE_S = 5  # uvicorn's default: an idle kept-alive connection is closed after it
TIMED_OUT = b"the request did not arrive in time: its connection is closed"
SPARE_FILES = 256  # open files beyond one per connection: database, store, logs
SENDFILE_STEP = 16 << 20  # bytes of a sendfile body sent under one deadline


class Protocol(H11Protocol):
    """uvicorn's h11 protocol with deadlines on a request's head, its body and the reading
    of its response, and a cap on connections (module doc)."""

    request_timeout: float = Limits.request_timeout
    max_connections: int = Limits.connections

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._app = self.app
        self.app = self._app_or_busy  # what handle_events runs for each request
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_bytes = 0  # body bytes received in the current window
        self._paused = False  # the application paused reading in the current window
        self._write_timer: asyncio.TimerHandle | None = None

    # --- the head ------------------------------------------------------------------

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head()

    def data_received(self, data: bytes) -> None:
        state = self.conn.their_state
        if state is h11.IDLE and self._head_timer is None:
            self._arm_head()  # a new request's first bytes (after a kept-alive wait)
        elif state is h11.SEND_BODY:
            self._body_bytes += len(data)
        super().data_received(data)

    def handle_events(self) -> None:
        # Called on data and when a response completes (pipelined requests): after it, the
        # client's state says which watch applies.
        super().handle_events()
        state = self.conn.their_state
        if state is not h11.IDLE:
            self._cancel_head()
        if state is h11.SEND_BODY:
            self._paused = self._paused or self.flow.read_paused
            if self._body_timer is None:
                self._arm_body()
        else:
            self._cancel_body()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head()
        self._cancel_body()
        self._cancel_write()
        super().connection_lost(exc)

    def _arm_head(self) -> None:
        self._cancel_head()
        self._head_timer = self.loop.call_later(self.request_timeout, self._head_expired)

    def _cancel_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_expired(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        partial = bool(self.conn.trailing_data[0])
        if partial:  # a client that sent nothing (a browser's spare socket) gets no answer
            self.transport.write(_raw_408())
            log.info("closed a connection from %s: its request head stalled", _peer(self))
        self.transport.close()

    # --- the body ------------------------------------------------------------------

    def _arm_body(self) -> None:
        self._body_bytes, self._paused = 0, self.flow.read_paused
        self._body_timer = self.loop.call_later(self.request_timeout, self._body_window)

    def _cancel_body(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_window(self) -> None:
        self._body_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.SEND_BODY:
            return
        cycle = self.cycle
        # A client that sent `Expect: 100-continue` waits for the application to ask for the
        # body; a paused read waits for the application to take what came: not stalls.
        waiting = cycle is not None and cycle.waiting_for_100_continue
        if self._body_bytes >= MIN_BODY_BYTES or self._paused or self.flow.read_paused or waiting:
            return self._arm_body()
        log.info("closed a connection from %s: its request body stalled", _peer(self))
        if cycle is not None and not cycle.response_started:
            self.transport.write(_h11_408(self.conn))
        if cycle is not None:
            # As uvicorn does when a client hangs up: the application's receive() answers
            # http.disconnect and whatever it sends is dropped.
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()

    # --- the response ---------------------------------------------------------------

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.request_timeout, self._write_expired)

    def resume_writing(self) -> None:
        self._cancel_write()
        super().resume_writing()

    def _cancel_write(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _write_expired(self) -> None:
        self._write_timer = None
        if self.transport.is_closing() or not self.flow.write_paused:
            return
        log.info("closed a connection from %s: it stopped reading its response", _peer(self))
        # abort, not close: close would wait for the unread buffer to be sent first.
        self.transport.abort()

    # --- zero-copy bodies ---------------------------------------------------------------

    async def _sendfile(self, file, offset: int, count: int) -> None:
        """Send COUNT bytes of FILE from OFFSET as (part of) the body of the response under
        way: h11 counts them against its Content-Length, the kernel copies them from the
        file to the socket. A client that takes none of a step for a request timeout, or
        that is gone, is cut off (the rest of the response is dropped, as on a hang-up)."""
        cycle = self.cycle
        if cycle is None or cycle.disconnected or self.transport.is_closing():
            return
        span = _Span(count)
        try:
            for piece in self.conn.send_with_data_passthrough(h11.Data(data=span)):
                if piece is not span:  # framing around the bytes (chunked: their length)
                    self.transport.write(piece)
                    continue
                end = offset + count
                while offset < end:
                    step = min(SENDFILE_STEP, end - offset)
                    sent = await asyncio.wait_for(
                        self.loop.sendfile(self.transport, file, offset, step),
                        self.request_timeout,
                    )
                    if not sent:  # the file is shorter than the answer said: end it
                        raise RuntimeError("the file ended early")
                    offset += sent
        except TimeoutError:
            log.info("closed a connection from %s: it stopped reading its response", _peer(self))
            self._cut_off(cycle)
        except (OSError, RuntimeError):  # the client is gone (reset, broken pipe, closing)
            self._cut_off(cycle)

    def _cut_off(self, cycle) -> None:
        cycle.disconnected = True
        self.transport.abort()

    # --- the cap on connections ------------------------------------------------------

    async def _app_or_busy(self, scope: Scope, receive: Receive, send: Send) -> None:
        if len(self.connections) <= self.max_connections:
            scope.setdefault("extensions", {})["mint.sendfile"] = self._sendfile
            return await self._app(scope, receive, send)
        log.warning("answered 503: %d connections are open", len(self.connections))
        message = (
            f"the registry has {len(self.connections) - 1} connections open, its limit "
            f"(--max-connections {self.max_connections}): try again shortly"
        )
        headers = {"Retry-After": "1", "Connection": "close"}
        response = error_response(503, "ServiceUnavailable", message, headers=headers)
        await response(scope, receive, send)


class _Span:
    """Stands for COUNT body bytes that the kernel sends (h11 only takes their length)."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count


def _peer(protocol: H11Protocol) -> str:
    client = protocol.client
    return f"{client[0]}:{client[1]}" if client else "?"


def _raw_408() -> bytes:
    """A 408 written outside h11, which has no request to answer (the head never came)."""
    head = (
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
        f"connection: close\r\ncontent-length: {len(TIMED_OUT)}\r\n\r\n"
    )
    return head.encode("ascii") + TIMED_OUT


def _h11_408(conn: h11.Connection) -> bytes:
    """A 408 answering the request whose body stalled ('' if h11 cannot send one now)."""
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"connection", b"close"),
        (b"content-length", str(len(TIMED_OUT)).encode("ascii")),
    ]
    try:
        return b"".join(
            conn.send(event) or b""
            for event in (
                h11.Response(status_code=408, headers=headers, reason=b"Request Timeout"),
                h11.Data(data=TIMED_OUT),
                h11.EndOfMessage(),
            )
        )
    except h11.LocalProtocolError:
        return b""


def protocol_for(limits: Limits) -> type[Protocol]:
    """The protocol class with LIMITS' deadline and cap (uvicorn makes one per connection)."""
    return type(
        "Protocol",
        (Protocol,),
        {"request_timeout": limits.request_timeout, "max_connections": limits.connections},
    )


def open_files_for(connections: int) -> None:
    """Raise this process's soft limit on open files, if it is lower, to let CONNECTIONS be
    open at once (up to the hard limit): past it, accept() fails and nobody gets in."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + SPARE_FILES
    if soft != resource.RLIM_INFINITY and soft < wanted:
        new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        if new < wanted:
            log.warning(
                "open files are limited to %d: fewer than --max-connections %d can be open",
                new,
                connections,
            )


def run(
    app: ASGIApp, host: str, port: int, limits: Limits, stopping: threading.Event | None = None
) -> None:
    """Serve APP on HOST:PORT until interrupted (SIGINT or SIGTERM), with LIMITS' deadline on
    slow clients and cap on connections. STOPPING is set when the signal arrives: uvicorn
    then waits for every response in flight to end, and an event stream ends only when it
    sees STOPPING (routes_events)."""
    import uvicorn

    open_files_for(limits.connections)
    # uvicorn's access log shows the method, path and status: never a request's headers,
    # so bearer tokens stay out of it.
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="info",
        http=protocol_for(limits),
        timeout_keep_alive=KEEP_ALIVE_S,
    )
    server = StopAwareServer(config, stopping or threading.Event())
    with contextlib.suppress(KeyboardInterrupt):  # as uvicorn.run: SIGINT, raised again
        server.run()
    if not server.started:
        raise SystemExit(STARTUP_FAILURE)


class StopAwareServer(Server):
    """uvicorn's server, which also sets an event when told to stop."""

    def __init__(self, config, stopping: threading.Event):
        super().__init__(config)
        self.stopping = stopping

    def handle_exit(self, sig, frame) -> None:
        self.stopping.set()
        super().handle_exit(sig, frame)
