"""Traces, feedback and datasets on a registry: the same operations, signatures and results as
`mint.traces.records` and `mint.traces.export`.

The registry records the token's name as who gave feedback or made an export, so `by=` is not
sent. An export is made by the registry (which keeps the dataset); its JSONL comes back and is
written here, and the file must hash to the dataset's id.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

from mint.errors import BlobCorrupt
from mint.exchange.wire import decode
from mint.jsonable import to_jsonable
from mint.objects import Dataset, Trace
from mint.remote.http import Client, segment
from mint.remote.repo import RemoteRepo
from mint.traces.export import check_format, write_file
from mint.traces.records import TraceFilter, check_score

BATCH = 1000  # rows a request (the registry's bound)
BATCH_BYTES = 8 << 20  # bytes of rows a request (the registry takes JSON bodies of 32 MiB)


def write_traces(repo: RemoteRepo, rows: Sequence[dict]) -> int:
    """Record trace rows on the registry, at most BATCH rows and about BATCH_BYTES a request;
    returns how many it wrote (rows it has already are skipped, so sending a batch again
    writes nothing twice). A malformed row refuses its request whole (InvalidTraces)."""
    return sum(written for written, _ in _send(repo, rows, "refuse"))


def write_traces_skipping(repo: RemoteRepo, rows: Sequence[dict]) -> tuple[int, list]:
    """Like `write_traces`, but the registry writes the good rows of each request and names
    the malformed ones: returns (written, [(index in ROWS, why), ...])."""
    written, skipped = 0, []
    for n, bad in _send(repo, rows, "skip"):
        written += n
        skipped += bad
    return written, skipped


def _send(repo: RemoteRepo, rows: Sequence[dict], invalid: str):
    """(written, [(index, why)]) of each request carrying a part of ROWS."""
    for start, part in _parts([_row(row) for row in rows]):
        body = {"rows": part} if invalid == "refuse" else {"rows": part, "invalid": invalid}
        answer = repo.client.post("/traces", body)
        skipped = [(start + s["row"], s["why"]) for s in answer.get("skipped") or ()]
        yield answer["written"], skipped


def _parts(rows: list[dict]):
    """(index of its first row, rows) of consecutive parts of ROWS within both bounds."""
    start, part, size = 0, [], 0
    for i, row in enumerate(rows):
        length = len(json.dumps(row, ensure_ascii=False)) + 1
        if part and (len(part) >= BATCH or size + length > BATCH_BYTES):
            yield start, part
            start, part, size = i, [], 0
        part.append(row)
        size += length
    if part:
        yield start, part


def record_feedback(
    repo: RemoteRepo,
    trace_id: str,
    score: float,
    label: str | None = None,
    *,
    by: str | None = None,
) -> Trace:
    """Record SCORE (0 to 1), and optionally the LABEL that should have answered, on a trace."""
    body = {"id": trace_id, "score": check_score(score), "label": label}
    return decode(Trace, repo.client.post("/traces/feedback", body))


def record_feedback_as(
    repo: RemoteRepo, token: str, trace_id: str, score: float, label: str | None = None
) -> Trace:
    """`record_feedback` with TOKEN rather than REPO's: a server following the registry passes
    on a client's feedback under the client's own token, so the registry checks that token
    (its role and lines) and records its name as who gave it."""
    body = {"id": trace_id, "score": check_score(score), "label": label}
    client = Client(repo.url, token, transport=getattr(repo, "_transport", None))
    try:
        return decode(Trace, client.post("/traces/feedback", body))
    finally:
        client.close()


def traces_ls(
    repo: RemoteRepo,
    *,
    set_rev: str | None = None,
    since: str | dt.datetime | None = None,
    label: str | None = None,
    min_score: float | None = None,
    variant: str | None = None,
    limit: int | None = 100,
) -> list[Trace]:
    """Traces newest first, with their latest feedback (see `mint.traces.records.traces_ls`)."""
    wanted = TraceFilter(set_rev, since, label, min_score, variant, limit)
    return [decode(Trace, t) for t in repo.client.get("/traces", **wanted.as_dict())]


def traces_export(
    repo: RemoteRepo,
    out_path: str | os.PathLike,
    *,
    format: str = "chat",
    set_rev: str | None = None,
    since: str | dt.datetime | None = None,
    label: str | None = None,
    min_score: float | None = None,
    variant: str | None = None,
    limit: int | None = None,
    by: str,
) -> Dataset:
    """Have the registry export and keep the traces the filters select; write its JSONL to
    OUT_PATH, checked against the dataset's sha256 (BlobCorrupt, and no file, if it differs)."""
    check_format(format)
    wanted = TraceFilter(set_rev, since, label, min_score, variant, limit)
    answer = repo.client.post("/traces/export", {"format": format, **wanted.as_dict()})
    dataset = decode(Dataset, answer["dataset"])
    path = Path(out_path)
    data = answer["content"].encode("utf-8")
    digest = hashlib.sha256(data).hexdigest()
    if digest != dataset.id:  # checked before anything is written: no file
        raise BlobCorrupt(dataset.id, digest)
    write_file(path, data)
    return dataclasses.replace(dataset, path=str(path))


def dataset_show(repo: RemoteRepo, dataset_id: str) -> Dataset:
    """A recorded export by its sha256 (or 7 or more of its first hex digits)."""
    return decode(Dataset, repo.client.get(f"/datasets/{segment(str(dataset_id))}"))


def _row(row: dict) -> dict:
    """ROW as JSON: its time as ISO 8601."""
    return to_jsonable(
        {k: v.isoformat() if isinstance(v, dt.datetime) else v for k, v in row.items()}
    )
