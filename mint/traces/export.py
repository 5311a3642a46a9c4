"""Exports of traces as JSONL datasets, each kept as a blob and recorded by its sha256.

`chat`: one OpenAI chat fine-tuning record a line, `{"messages": [..., {"role": "assistant",
"content": RESPONSE}], "trace_id", "score"}`; traces recorded without content are skipped.

`router`: one routing example a line, `{"messages": [...], "label", "trace_id", "score"}`, as
`mint route-eval` reads them. The label is the one feedback gave, else the routed label when
the latest feedback scored it 0.5 or more; turns with neither are skipped.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from pathlib import Path

import sqlalchemy as sa

from mint import schema as s
from mint.db import insert_new
from mint.errors import AmbiguousRevision, DatasetNotFound, InvalidConfig, MintError
from mint.ids import iso, utcnow
from mint.objects import Dataset, Trace
from mint.refs.revisions import resolve
from mint.repo import Repo
from mint.traces.records import TraceFilter, select_traces

FORMATS = ("chat", "router")
GOOD = 0.5  # a routed label counts as correct when its feedback scored at least this


def traces_export(
    repo: Repo,
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
    """Write the traces the filters select (oldest first) to OUT_PATH as JSONL in FORMAT,
    store the file as a blob and record it as a dataset; returns it (its id is the sha256)."""
    check_format(format)
    wanted = TraceFilter(set_rev, since, label, min_score, variant, limit)
    traces = select_traces(repo, wanted, oldest_first=True)
    make = chat_record if format == "chat" else router_record
    records = [r for r in map(make, traces) if r is not None]
    path = Path(out_path)
    staged = _write_jsonl(path, records)  # beside OUT_PATH, moved there once stored
    try:
        put = repo.store.put(staged)
        row = {
            "id": put.id,
            "format": format,
            "records": len(records),
            "size": put.size,
            "filters": wanted.as_dict(),
            "created_at": utcnow(),
            "created_by": by,
        }
        with repo.db.write() as conn:
            if not insert_new(conn, s.datasets, row):  # the same bytes were exported before
                row = dict(conn.execute(_by_id(put.id)).one()._mapping)
        os.replace(staged, path)  # the file appears only once its dataset is recorded
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    return _dataset(row, str(path))


def check_format(format: str) -> None:
    """FORMAT is one of FORMATS (InvalidConfig): checked here, and by a registry's client
    before it asks for an export."""
    if format not in FORMATS:
        raise InvalidConfig(f"unknown export format {format!r}: one of {', '.join(FORMATS)}")


def chat_record(trace: Trace) -> dict | None:
    """The trace as an OpenAI chat fine-tuning record (None without content)."""
    if not trace.messages or trace.response is None:
        return None
    messages = [
        {"role": m.get("role"), "content": m.get("content")}
        for m in trace.messages
        if isinstance(m, dict)
    ]
    messages.append({"role": "assistant", "content": trace.response})
    return {"messages": messages, "trace_id": trace.id, "score": trace.score}


def router_record(trace: Trace) -> dict | None:
    """The trace as a routing example, or None when it has no content or no usable label."""
    if not trace.messages:
        return None
    label = trace.feedback_label
    if label is None and trace.score is not None and trace.score >= GOOD:
        label = trace.label
    if label is None:
        return None
    return {"messages": trace.messages, "label": label, "trace_id": trace.id, "score": trace.score}


def dataset_show(repo: Repo, dataset_id: str) -> Dataset:
    """A recorded export by its sha256 (or 7 or more of its first hex digits)."""
    with repo.db.read() as conn:
        return dataset_in(conn, dataset_id)


def dataset_in(conn: sa.Connection, dataset_id: str) -> Dataset:
    """The dataset DATASET_ID names, in an open transaction (DatasetNotFound)."""
    text = str(dataset_id).strip().lower()
    if len(text) < 7 or any(c not in "0123456789abcdef" for c in text):
        raise DatasetNotFound(dataset_id)
    q = sa.select(s.datasets).where(s.datasets.c.id.startswith(text, autoescape=True)).limit(2)
    found = conn.execute(q).all()
    if not found:
        raise DatasetNotFound(dataset_id)
    if len(found) > 1:
        raise AmbiguousRevision(dataset_id, [r.id for r in found])
    return _dataset(dict(found[0]._mapping))


def known_dataset(conn: sa.Connection, text: str) -> Dataset | None:
    """The dataset TEXT names (its sha256, a prefix of 7 or more, `sha256:` allowed), else None:
    for `show`, where a commit's `data` meta may name anything."""
    try:
        return dataset_in(conn, text.removeprefix("sha256:"))
    except (DatasetNotFound, AmbiguousRevision):
        return None


def _by_id(dataset_id: str):
    return sa.select(s.datasets).where(s.datasets.c.id == dataset_id)


def _dataset(row: dict, path: str | None = None) -> Dataset:
    return Dataset(
        id=row["id"],
        format=row["format"],
        records=row["records"],
        size=row["size"],
        filters=row["filters"],
        created_at=iso(row["created_at"]),
        created_by=row["created_by"],
        path=path,
    )


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    """One JSON object a line, written (synced) to a temporary file beside PATH; returns it."""
    lines = (json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records)
    return staged_file(path, "".join(lines).encode("utf-8"))


def write_file(path: Path, data: bytes) -> None:
    """DATA written to a temporary file beside PATH, synced, and moved into place."""
    os.replace(staged_file(path, data), path)


def staged_file(path: Path, data: bytes) -> Path:
    """DATA written to a temporary file beside PATH and synced (removed if that fails)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def dataset_lines(repo: Repo, dataset: Dataset) -> set[str] | None:
    """The set lines whose traces DATASET holds, with the line its `set` filter names; None
    when that cannot be told (a record naming a trace no longer recorded, or no blob here):
    what a token limited to lines must be allowed to read before it may read the dataset."""
    try:
        with repo.store.open(dataset.id) as f:
            ids = {json.loads(line).get("trace_id") for line in f if line.strip()}
    except (OSError, ValueError, AttributeError, MintError):
        return None
    lines: set[str] = set()
    wanted = sorted(i for i in ids if isinstance(i, str))
    if len(wanted) != len(ids):
        return None
    with repo.db.read() as conn:
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            q = sa.select(s.traces.c.id, s.traces.c.set_line).where(s.traces.c.id.in_(chunk))
            found = dict(conn.execute(q).tuples().all())
            if len(found) != len(chunk):
                return None
            lines.update(found.values())
        named = (dataset.filters or {}).get("set")
        if named is not None:
            line = _line_named(conn, str(named))
            if line is None:
                return None
            lines.add(line)
    return lines


def _line_named(conn: sa.Connection, rev: str) -> str | None:
    """REV's line: REV itself when it is a line's name, else its commit's line (None when
    REV names nothing now)."""
    if conn.execute(sa.select(s.lines.c.name).where(s.lines.c.name == rev)).first():
        return rev
    try:
        commit = resolve(conn, rev).id
    except MintError:
        return None
    return conn.execute(sa.select(s.commits.c.line).where(s.commits.c.id == commit)).scalar()
