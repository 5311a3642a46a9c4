"""What serves: serving processes report here (`POST /fleet/report`), and anyone who may read a
line reads its fleet (`GET /fleet`) and served history (`GET /fleet/history`); `/metrics`
has the fleet's gauges and counters for Prometheus (`mint.registry.metrics`).

A report is a thin translation onto `mint.fleet.records.fleet_report`, the operation a serving
process on a local repository calls: its shape and sizes are checked here (422), then a token
may report only for lines it may read (403, before anything is read or written); the commits
it names must be on those lines (422), and one token reports for at most `Limits.instances`
live instances (429). A refused report stores nothing.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import PlainTextResponse
from pydantic import ConfigDict, Field, StringConstraints

from mint import api, objects
from mint.fleet.report import MAX_NAMES, MAX_REASON
from mint.registry.auth import Reader, RepoDep, check_line
from mint.registry.models import Body, Id64, Rev
from mint.registry.render import MintJSON, answer
from mint.registry.schemas import ERROR_RESPONSES, ErrorBody, list_of

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES, tags=["fleet"])
root = APIRouter()  # /metrics, where Prometheus looks

Time = Annotated[str, StringConstraints(min_length=1, max_length=40)]  # ISO 8601, with a zone
Word = Annotated[str, StringConstraints(min_length=1, max_length=64)]


class Strict(Body):
    """No coercion: a number sent as text is malformed, as `mint.fleet.report` says."""

    model_config = ConfigDict(extra="forbid", strict=True)


class CanaryIn(Strict):
    commit: Id64  # the candidate served beside the holder
    fraction: Annotated[float, Field(gt=0, lt=1)]
    since: Time


class FailureIn(Strict):
    commit: Id64 | None = None  # what it failed to stage
    at: Time
    kind: Word  # the error's class
    reason: Annotated[str, StringConstraints(min_length=1, max_length=MAX_REASON)]


class NameIn(Strict):
    name: Annotated[str, StringConstraints(min_length=1, max_length=300)]  # LINE@REV
    commit: Id64 | None = None  # what it serves now for the name
    since: Time | None = None
    canary: CanaryIn | None = None
    failure: FailureIn | None = None


class ReportBody(Strict):
    """A serving process's report (docs/fleet.md)."""

    instance: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    engine: Word
    base: Id64 | None = None  # the served base's fingerprint
    version: Word | None = None
    interval: Annotated[float, Field(ge=0.1, le=3600)]  # seconds between its reports
    started_at: Time
    names: Annotated[list[NameIn], Field(max_length=MAX_NAMES)] = []
    dropped: Annotated[int, Field(ge=0, lt=2**31)] = 0  # reports it could not send
    stopped: bool = False  # a goodbye: the process stops


TOO_MANY = {429: {"model": ErrorBody, "description": "the token's live instances at the bound"}}


@router.post("/fleet/report", status_code=204, responses=TOO_MANY)
def fleet_report(request: Request, repo: RepoDep, who: Reader, body: ReportBody) -> None:
    for entry in body.names:
        check_line(who, entry.name.partition("@")[0])
    limit = request.app.state.limits.instances
    api.fleet_report(repo, body.model_dump(), by=who.name, max_live=limit)


@router.get("/fleet", response_model=list_of(objects.ChannelFleet))
def fleet(
    repo: RepoDep,
    who: Reader,
    ref: Annotated[Rev | None, Query(description="LINE@CHANNEL (default: every name)")] = None,
) -> MintJSON:
    if ref is not None:
        check_line(who, ref.partition("@")[0])
    return answer([view for view in api.fleet(repo, ref) if who.may_touch(view.line)])


@router.get("/fleet/history", response_model=list_of(objects.ServedInterval))
def fleet_history(
    repo: RepoDep,
    who: Reader,
    ref: Annotated[Rev, Query(description="LINE@CHANNEL")],
    at: Annotated[
        str | None, Query(max_length=100, description="an ISO 8601 time, or an age: 10m")
    ] = None,
) -> MintJSON:
    check_line(who, ref.partition("@")[0])
    return answer(api.fleet_history(repo, ref, at=at))


@root.get("/metrics", include_in_schema=False)
def metrics(request: Request, repo: RepoDep, who: Reader) -> PlainTextResponse:
    """Prometheus text: instances per line, channel and commit; failed stagings by reason."""
    from mint.registry.metrics import render

    text = render(repo, who, request.app.state.diverged_after)
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")
