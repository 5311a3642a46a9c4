"""Traces, feedback and datasets: what production servers following the registry record, and
what `mint --repo URL traces ls|export|feedback` and `dataset show` read
(`GET /api/v1/datasets/{id}` lives in `web/datasets.py`, which checks the token's lines).

Recording a batch and posting feedback take a writer (a serving process needs a writer token
to record its turns). Every row of a batch is checked before any is written: by default a
malformed one refuses the whole batch (400, naming the row); with `"invalid": "skip"` the
good rows are written and each malformed one is reported by index in `skipped` (what a
serving process sends, so that one bad row never costs the others). Rows whose id is recorded
already are skipped, so a batch sent again after a lost answer writes nothing twice. A token
limited to lines records, reads, scores and exports only traces of sets on its lines (a
listing without `set` is filtered after reading; an export must name a `set` on one of them).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal

import sqlalchemy as sa
from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from mint import api, objects
from mint import schema as s
from mint.db import is_unique_violation
from mint.errors import Forbidden, InvalidTraces
from mint.ids import Kind, as_utc
from mint.registry import queries
from mint.registry.auth import Reader, RepoDep, Writer, check_line
from mint.registry.models import Body, Id64, Name, Rev
from mint.registry.render import MintJSON, answer
from mint.registry.schemas import ERROR_RESPONSES, list_of, model_of
from mint.repo import Repo
from mint.team.tokens import Identity
from mint.traces.export import FORMATS
from mint.traces.records import traces_get

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES, tags=["traces"])

MAX_ROWS = 1000  # rows in one batch (a server sends at most 256 at a time)
MAX_MESSAGES = 1000
MAX_RESPONSE = 1_000_000  # characters of one answer
TraceId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._:-]{1,64}$")]
Number = Annotated[float, Field(allow_inf_nan=False)]


class TraceRow(Body):
    """One served turn, as `mint.runtime.traces.trace_row` makes it."""

    model_config = ConfigDict(extra="forbid", strict=False)

    id: TraceId
    at: dt.datetime
    set_line: Name
    set_commit: Id64
    variant: Name
    label: Name | None = None
    probs: Annotated[dict[Name, Number], Field(max_length=1000)] | None = None
    expert_commit: Id64 | None = None
    user: Annotated[str, StringConstraints(max_length=200)] | None = None
    messages: Annotated[list[dict[str, Any]], Field(max_length=MAX_MESSAGES)] | None = None
    response: Annotated[str, StringConstraints(max_length=MAX_RESPONSE)] | None = None
    latency: Annotated[dict[Name, Number], Field(max_length=100)] = {}


class TracesBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rows: Annotated[
        list[dict[str, Any]],
        Field(max_length=MAX_ROWS, description="trace rows: the fields of a `TraceRow` each"),
    ]
    invalid: Annotated[
        Literal["refuse", "skip"],
        Field(description="refuse: a malformed row refuses the batch; skip: it is reported"),
    ] = "refuse"


class FeedbackBody(Body):
    id: TraceId
    score: Annotated[Any, Field(json_schema_extra={"type": "number"}, description="0 to 1")]
    label: Name | None = None


class ExportBody(Body):
    format: Annotated[str, StringConstraints(pattern="^(" + "|".join(FORMATS) + ")$")] = "chat"
    set: Rev | None = None
    since: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = None
    label: Name | None = None
    min_score: Annotated[float, Field(ge=0, le=1)] | None = None
    variant: Name | None = None
    limit: Annotated[int, Field(ge=0, le=1_000_000)] | None = None


class Skipped(BaseModel):
    row: int  # its index in the batch
    why: str


class Written(BaseModel):
    written: int  # rows recorded now (rows recorded before are skipped)
    skipped: list[Skipped] = []  # malformed rows not written (`"invalid": "skip"` only)


class Exported(BaseModel):
    dataset: model_of(objects.Dataset)  # type: ignore[valid-type]
    content: str  # the JSONL file, whose UTF-8 bytes hash to the dataset's id


@router.post("/traces", response_model=Written)
def write_traces(repo: RepoDep, who: Writer, body: TracesBody) -> MintJSON:
    commits = {raw.get("set_commit") for raw in body.rows}
    known = _set_lines(repo, sorted(c for c in commits if isinstance(c, str)))
    rows, skipped, seen = [], [], set()
    for i, raw in enumerate(body.rows):
        try:
            row = _checked(i, raw)
            _check_row(who, known, seen, i, row)
        except InvalidTraces as exc:
            if body.invalid == "refuse":
                raise
            skipped.append({"row": i, "why": exc.why})
            continue
        seen.add(row["id"])
        rows.append(row)
    try:
        written = api.write_traces(repo, _unrecorded(repo, rows))
    except sa.exc.IntegrityError as exc:
        if not is_unique_violation(exc):
            raise
        # another replica recorded some of these rows a moment ago (a batch sent again)
        written = api.write_traces(repo, _unrecorded(repo, rows))
    return answer({"written": written, "skipped": skipped})


@router.post("/traces/feedback", response_model=model_of(objects.Trace))
def record_feedback(repo: RepoDep, who: Writer, body: FeedbackBody) -> MintJSON:
    check_line(who, traces_get(repo, body.id).set_line)
    return answer(api.record_feedback(repo, body.id, body.score, body.label, by=who.name))


@router.get("/traces", response_model=list_of(objects.Trace))
def traces_ls(
    repo: RepoDep,
    who: Reader,
    set: Annotated[Rev | None, Query(description="a set line, or one set revision")] = None,
    since: Annotated[str | None, Query(max_length=100, description="ISO time or age")] = None,
    label: Annotated[Name | None, Query()] = None,
    min_score: Annotated[float | None, Query(ge=0, le=1)] = None,
    variant: Annotated[Name | None, Query()] = None,
    limit: Annotated[int | None, Query(ge=0, le=100_000, description="default: all")] = None,
) -> MintJSON:
    if set is not None:
        _check_set(repo, who, set)
    wanted = dict(set_rev=set, since=since, label=label, min_score=min_score, variant=variant)
    if who.lines is None or set is not None:
        return answer(api.traces_ls(repo, **wanted, limit=limit))
    found = [t for t in api.traces_ls(repo, **wanted, limit=None) if who.may_touch(t.set_line)]
    return answer(found if limit is None else found[:limit])


@router.post("/traces/export", response_model=Exported)
def traces_export(repo: RepoDep, who: Writer, body: ExportBody) -> MintJSON:
    if who.lines is not None:
        if body.set is None:
            raise Forbidden(who.name, "export every line's traces: name a set of the token's")
        _check_set(repo, who, body.set)
    filters = body.model_dump(exclude={"format", "set"})
    with tempfile.TemporaryDirectory(prefix="mint-export-") as folder:
        path = Path(folder) / "export.jsonl"
        dataset = api.traces_export(
            repo, path, format=body.format, set_rev=body.set, **filters, by=who.name
        )
        content = path.read_bytes().decode("utf-8")
    return answer({"dataset": _without_path(dataset), "content": content})


def _without_path(dataset: objects.Dataset) -> objects.Dataset:
    """The dataset as the client sees it: the server's temporary path means nothing there."""
    return dataclasses.replace(dataset, path=None)


def _checked(i: int, raw: dict) -> dict:
    """Row I as the `traces` columns; InvalidTraces (400) naming its first problem."""
    try:
        row = TraceRow.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in ("rows", i, *first.get("loc", ())))
        raise InvalidTraces(f"{where}: {first.get('msg', 'invalid')}") from None
    clean = row.model_dump()
    clean["at"] = as_utc(row.at)
    return clean


def _check_row(who: Identity, known: dict[str, str], seen: set[str], i: int, row: dict) -> None:
    """Row I's set commit is a set commit here (KNOWN: commit -> line), on the line it names,
    and one the token may touch (Forbidden refuses the batch: the token is at fault); its id
    is not one of SEEN, the batch's earlier rows'."""
    if row["id"] in seen:
        raise InvalidTraces(f"rows.{i}.id: the trace id appears twice in the batch")
    line = known.get(row["set_commit"])
    if line is None:
        raise InvalidTraces(f"rows.{i}.set_commit: no set commit {row['set_commit'][:12]}")
    if line != row["set_line"]:
        raise InvalidTraces(f"rows.{i}.set_line: the set commit is on line {line}")
    check_line(who, line)


def _set_lines(repo: Repo, ids: list[str]) -> dict[str, str]:
    """The line of each set commit of IDS that is here."""
    c = s.commits.c
    q = sa.select(c.id, c.line).where(c.id.in_(ids), c.kind == Kind.SET)
    with repo.db.read() as conn:
        return dict(conn.execute(q).tuples().all())


def _check_set(repo: Repo, who: Identity, rev: str) -> None:
    """A token limited to lines names a set line of its own, or a commit of one."""
    if who.lines is None:
        return
    with repo.db.read() as conn:
        is_line = conn.execute(sa.select(s.lines.c.name).where(s.lines.c.name == rev)).first()
    check_line(who, rev if is_line else queries.line_of(repo, rev))


def _unrecorded(repo: Repo, rows: list[dict]) -> list[dict]:
    """The rows whose id no trace has yet."""
    if not rows:
        return []
    ids = [row["id"] for row in rows]
    with repo.db.read() as conn:
        seen = set(conn.execute(sa.select(s.traces.c.id).where(s.traces.c.id.in_(ids))).scalars())
    return [row for row in rows if row["id"] not in seen]
