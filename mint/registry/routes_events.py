"""The event stream (role: reader): `GET /api/v1/events`, server-sent events of ref moves.

Every move of a ref appends one `ref_history` row; its integer id is the event's id. The
stream sends the rows after `Last-Event-ID` (or `?after=ID`), then polls the table for new
ones. The server keeps nothing between requests, so replicas over one database send the
same stream. Rows on lines outside the token's line globs are skipped.

Streams do not each poll the table: one task per replica (`Tail`) reads the newest row id
every TICK while any stream is open, and wakes the streams when it grows. So a move is sent
within about TICK of its commit, and a hundred followers cost one small query per TICK.

A stream ends when the server is told to stop (`app.state.stopping`, set on SIGTERM or
SIGINT): the server waits for every response in flight, and would otherwise wait for every
follower to hang up. A follower reconnects, to this replica once it is back or to another.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from mint.refs.events import BATCH, event_of, last_id, rows_after
from mint.registry.auth import Reader, RepoDep
from mint.registry.schemas import ERROR_RESPONSES
from mint.repo import Repo
from mint.team.tokens import Identity

log = logging.getLogger("mint.registry")
router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES, tags=["events"])

TICK = 0.05  # seconds between looks at the newest row id (one look per replica)
HEARTBEAT = 15.0  # seconds between comments when nothing moves


def frame(event: dict) -> str:
    """EVENT as one server-sent event."""
    body = json.dumps(event, separators=(",", ":"))
    return f"id: {event['id']}\nevent: {event['type']}\ndata: {body}\n\n"


class Tail:
    """The newest ref_history id of REPO, read every TICK by one task while any stream is
    open. `wait(after, timeout)` returns once a row after AFTER exists, at TIMEOUT, or once
    STOPPING is set."""

    def __init__(self, repo: Repo, stopping: threading.Event):
        self.repo = repo
        self.stopping = stopping
        self.loop = asyncio.get_running_loop()
        self.newest = 0
        self._grew = asyncio.Event()  # set, then replaced, each time `newest` grows
        self._streams = 0
        self._task: asyncio.Task | None = None

    @contextlib.asynccontextmanager
    async def opened(self) -> AsyncIterator[Tail]:
        """Count a stream as open while the block runs (the task runs while any is)."""
        self._streams += 1
        try:
            if self._task is None or self._task.done():
                self.newest = await run_in_threadpool(last_id, self.repo)
                self._task = asyncio.create_task(self._run())
            yield self
        finally:
            self._streams -= 1

    async def wait(self, after: int, timeout: float) -> None:
        if self.newest > after or self.stopping.is_set():
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._grew.wait(), timeout)

    async def _run(self) -> None:
        while self._streams > 0:
            await asyncio.sleep(TICK)
            if self.stopping.is_set():
                self._wake()
                continue
            try:
                newest = await run_in_threadpool(last_id, self.repo)
            except Exception as exc:  # noqa: BLE001 - a database hiccup: look again next tick
                log.warning("event stream: reading ref_history: %s", exc)
                continue
            if newest > self.newest:
                self.newest = newest
                self._wake()

    def _wake(self) -> None:
        """Wake every stream waiting now."""
        grew, self._grew = self._grew, asyncio.Event()
        grew.set()


def tail_of(request: Request, repo: Repo) -> Tail:
    """The replica's one `Tail` (made on the first stream, and again should the app be run
    on another event loop, as tests may)."""
    tail = getattr(request.app.state, "event_tail", None)
    if tail is None or tail.loop is not asyncio.get_running_loop():
        tail = request.app.state.event_tail = Tail(repo, request.app.state.stopping)
    return tail


async def stream(tail: Tail, who: Identity, after: int | None) -> AsyncIterator[str]:
    """Every event after AFTER (None: from now on) on the token's lines, then new ones as
    they are written, until the server stops. It opens with AFTER as the stream's id, so a
    client that reconnects before any event resumes from there."""
    async with tail.opened():
        if after is None:
            after = await run_in_threadpool(last_id, tail.repo)
        yield f": mint events\nretry: 1000\nid: {after}\n\n"
        quiet_since = time.monotonic()
        while not tail.stopping.is_set():
            rows = await run_in_threadpool(rows_after, tail.repo, after)
            for row in rows:
                after = row.id
                if who.may_touch(row.line):
                    quiet_since = time.monotonic()
                    yield frame(event_of(row))
            if len(rows) == BATCH:
                continue
            quiet = time.monotonic() - quiet_since
            if quiet >= HEARTBEAT:
                quiet_since, quiet = time.monotonic(), 0.0
                yield ": heartbeat\n\n"
            await tail.wait(after, HEARTBEAT - quiet)


def start_of(last_event_id: str | None, after: int | None, tail: bool) -> int | None:
    """Where the stream starts: the Last-Event-ID header, else `after`, else the beginning
    (or, with TAIL, the newest event: None)."""
    if last_event_id and last_event_id.strip().isdigit():
        return int(last_event_id.strip())
    if after is not None:
        return after
    return None if tail else 0


# Not in /openapi.json: a stream that never ends is no request/answer pair to describe (or
# fuzz); docs/registry-api.md describes it.
@router.get("/events", response_class=StreamingResponse, include_in_schema=False)
async def events(
    request: Request,
    repo: RepoDep,
    who: Reader,
    after: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
    last_event_id: Annotated[str | None, Header(max_length=40)] = None,
    tail: Annotated[
        bool, Query(description="without an id to resume from: only new events")
    ] = False,
) -> StreamingResponse:
    """Ref moves as server-sent events: `channel.moved`, `tag.moved`, `line.pushed`,
    `canary.started`, `canary.stopped`, `fleet.diverged`, `fleet.converged`,
    resumed after `Last-Event-ID` (or `after`)."""
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(
        stream(tail_of(request, repo), who, start_of(last_event_id, after, tail)),
        media_type="text/event-stream",
        headers=headers,
    )
