"""Traces, feedback and dataset exports: the library and `mint traces` on both databases, then
the real server recording turns and taking feedback (POST /v1/feedback)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import time
import uuid

import httpx
import pytest

from mint import api
from mint.errors import DatasetNotFound, InvalidFeedback, InvalidTime, TraceNotFound
from mint.runtime.evaluate import read_records

from conftest import one_line_error, snapshot
from support.disk import SmallDisk, mountable
from support.pgdb import pg_database
from support.runtime import committed_demo
from support.runtime import demo as demo_files

pytestmark = pytest.mark.xdist_group("demo")

CONVERSATION = [{"role": "user", "content": "please fix the python bug"}]


def row(label="coding", *, at=None, variant="production", user="u1", content=True, **extra):
    """A trace row as the runtime writes it."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "at": at or dt.datetime.now(dt.UTC),
        "set_line": "macaron",
        "set_commit": "ab" * 32,
        "variant": variant,
        "label": label,
        "probs": {"coding": 0.7, "chat": 0.2, "agent": 0.1},
        "expert_commit": "cd" * 32,
        "user": user,
        "messages": CONVERSATION if content else None,
        "response": f"{label} answer" if content else None,
        "latency": {"route": 0.01, "answer": 0.02, "summary": 0.01, "total": 0.04},
        **extra,
    }


@pytest.fixture
def traced(repo):
    """Five traces: two days old, scored, corrected, unscored, and without content."""
    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=2)
    rows = [
        row("coding", at=old),
        row("coding"),
        row("chat", variant="canary"),
        row("agent"),
        row("coding", content=False),
    ]
    assert api.write_traces(repo, rows) == 5
    ids = [r["id"] for r in rows]
    api.record_feedback(repo, ids[0], 1.0, by="ann")
    api.record_feedback(repo, ids[1], 0.2, by="ann")
    api.record_feedback(repo, ids[1], 0.9, by="bob")  # the latest counts
    api.record_feedback(repo, ids[2], 0.0, "agent", by="ann")
    api.record_feedback(repo, ids[4], 1.0, by="ann")
    return ids


def test_ls_reads_traces_newest_first_with_their_latest_feedback(repo, traced):
    found = api.traces_ls(repo)
    assert [t.id for t in found][-1] == traced[0]  # two days old: last
    by_id = {t.id: t for t in found}
    assert by_id[traced[1]].score == 0.9
    assert by_id[traced[2]].score == 0.0 and by_id[traced[2]].feedback_label == "agent"
    assert by_id[traced[3]].score is None
    assert by_id[traced[4]].messages is None
    first = by_id[traced[1]]
    assert first.probs == {"coding": 0.7, "chat": 0.2, "agent": 0.1}
    assert first.latency["total"] == 0.04 and first.user == "u1"


def test_ls_filters(repo, traced):
    def ids(**filters):
        return {t.id for t in api.traces_ls(repo, **filters)}

    assert ids(since="1d") == set(traced[1:])
    recent = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).isoformat()
    assert ids(since=recent) == set(traced[1:])
    assert ids(label="coding") == {traced[0], traced[1], traced[4]}
    assert ids(min_score=0.5) == {traced[0], traced[1], traced[4]}
    assert ids(variant="canary") == {traced[2]}
    assert len(api.traces_ls(repo, limit=2)) == 2
    with pytest.raises(InvalidTime):
        api.traces_ls(repo, since="yesterday-ish")


def test_feedback_refuses_unknown_ids_and_bad_scores(repo, traced):
    before = snapshot(repo)
    with pytest.raises(TraceNotFound):
        api.record_feedback(repo, "chatcmpl-nope", 1.0)
    for bad in (1.5, -0.1, float("nan"), "1", True):
        with pytest.raises(InvalidFeedback):
            api.record_feedback(repo, traced[1], bad)
    with pytest.raises(InvalidFeedback):
        api.record_feedback(repo, traced[1], 1.0, "not-a-label")
    assert snapshot(repo) == before


def read_jsonl(path):
    """One JSON object a line, as `datasets`' json loader reads JSONL."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_export_chat_is_openai_jsonl_named_by_its_sha256(repo, traced, tmp_path):
    out = tmp_path / "chat.jsonl"
    d = api.traces_export(repo, out, format="chat", min_score=0.5, by="ann")
    records = read_jsonl(out)
    # the trace without content is skipped; oldest first
    assert [r["trace_id"] for r in records] == [traced[0], traced[1]]
    assert records[0]["messages"] == [
        *CONVERSATION,
        {"role": "assistant", "content": "coding answer"},
    ]
    assert all(set(m) == {"role", "content"} for r in records for m in r["messages"])
    assert d.records == 2 and d.format == "chat" and d.size == out.stat().st_size
    assert d.id == hashlib.sha256(out.read_bytes()).hexdigest()
    assert repo.store.has(d.id)
    shown = api.dataset_show(repo, d.id[:10])
    assert (shown.id, shown.records, shown.filters) == (d.id, 2, {"min_score": 0.5})
    with pytest.raises(DatasetNotFound):
        api.dataset_show(repo, "0" * 64)


def test_export_router_takes_labels_from_feedback_and_route_eval_reads_it(repo, traced, tmp_path):
    out = tmp_path / "router.jsonl"
    d = api.traces_export(repo, out, format="router", by="ann")
    records = list(read_records(out))  # exactly what `mint route-eval --data` reads
    labels = {r["trace_id"]: r["label"] for r in records}
    # scored >= 0.5: the routed label; corrected: the label given; unscored or no content: none
    assert labels == {traced[0]: "coding", traced[1]: "coding", traced[2]: "agent"}
    assert d.records == 3 and read_jsonl(out) == records
    again = api.traces_export(repo, tmp_path / "again.jsonl", format="router", by="bob")
    assert again.id == d.id and again.created_by == "ann"  # the same bytes: one dataset


def test_cli_traces_ls_export_and_show_links_the_dataset(based, repo, traced, tmp_path, models):
    mint = based
    listed = mint("traces", "ls", "--label", "coding", "--min-score", "0.5", "--json")
    assert listed.code == 0, listed
    assert {t["id"] for t in listed.json()} == {traced[0], traced[1], traced[4]}
    text = mint("traces", "ls", "--variant", "canary")
    assert text.code == 0 and traced[2] in text.out
    out = tmp_path / "r.jsonl"
    exported = mint("traces", "export", "--format", "router", "-o", out, "--json")
    assert exported.code == 0, exported
    d = exported.json()
    assert d["id"] == hashlib.sha256(out.read_bytes()).hexdigest() and d["records"] == 3
    plain = mint("traces", "export", "--format", "chat", "-o", tmp_path / "c.jsonl")
    assert plain.code == 0 and "sha256:" in plain.out
    commit = mint("commit", "chat", models["a2"], "-m", "trained", "--meta", f"data={d['id']}")
    assert commit.code == 0, commit
    shown = mint("show", "chat", "--json").json()
    assert shown["meta"]["data"] == d["id"]
    assert shown["dataset"]["format"] == "router" and shown["dataset"]["records"] == 3
    text = mint("show", "chat")
    assert "router export of 3 traces" in text.out and d["id"][:12] in text.out
    assert mint("dataset", "show", d["id"][:12], "--json").json()["id"] == d["id"]
    fed = mint("traces", "feedback", traced[3], "0.75", "--label", "chat", "--json")
    assert fed.code == 0 and fed.json()["score"] == 0.75


def test_cli_refuses_bad_input_in_one_line(based, repo, traced, tmp_path):
    mint = based
    before = snapshot(repo)
    one_line_error(mint("traces", "feedback", "chatcmpl-nope", "1"), "no trace")
    one_line_error(mint("traces", "feedback", traced[1], "2"), "score")
    one_line_error(mint("traces", "ls", "--since", "whenever"), "not a time")
    one_line_error(mint("dataset", "show", "f" * 64), "no dataset")
    one_line_error(mint("traces", "export", "--format", "csv", "-o", tmp_path / "x"))
    assert snapshot(repo) == before


def test_an_export_whose_dataset_cannot_be_stored_leaves_no_file(based, repo, traced, tmp_path):
    """`traces export -o FILE` writes FILE only once its dataset is stored: with the object
    store's disk full it fails in one line and leaves neither FILE, nor a temporary file
    beside it, nor a dataset. Where this process may not mount a small full disk on the
    store's folder, the folder is made read-only instead (what a non-root user then sees)."""
    mint = based
    objects = repo.root / ".mint" / "objects"
    out = tmp_path / "out" / "r.jsonl"
    disk = SmallDisk(objects, "1m") if mountable() else None
    if disk is not None:
        disk.fill()
    else:
        objects.chmod(0o500)
    try:
        before = snapshot(repo)
        one_line_error(mint("traces", "export", "--format", "router", "-o", out))
        assert not out.exists() and list(out.parent.glob("*")) == []
        assert snapshot(repo) == before
    finally:
        disk.close() if disk is not None else objects.chmod(0o755)
    stored = mint("traces", "export", "--format", "router", "-o", out, "--json")
    assert stored.code == 0 and out.exists(), stored


def test_a_commit_naming_data_that_is_no_dataset_is_warned(based, repo, traced, tmp_path, models):
    mint = based
    d = api.traces_export(repo, tmp_path / "r.jsonl", format="router", by="ann")
    named = mint("commit", "chat", models["a2"], "-m", "trained", "--meta", f"data={d.id}")
    assert named.code == 0 and "warning" not in named.err, named
    missing = "0123abcd" * 8  # the sha256 of an export that was never stored
    fresh = mint("commit", "chat", models["a1"], "-m", "again", "--meta", f"data={missing}")
    assert fresh.code == 0, fresh
    assert f"data={missing} names no dataset recorded in this repository" in fresh.err
    assert api.show(repo, "chat").meta["data"] == missing  # committed all the same
    other = mint("commit", "chat", models["a3"], "-m", "hub", "--meta", "data=hf://org/set")
    assert other.code == 0 and "warning" not in other.err  # not a dataset id: nothing said


@pytest.fixture
def based(mint, models):
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    return mint


# --- the real server: turns recorded, feedback taken ---------------------------------------


@contextlib.contextmanager
def database(kind: str):
    if kind == "sqlite":
        yield None
    else:
        with pg_database() as url:
            yield url


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def served(request, tmp_path_factory):
    """`macaron@production` served from a real repository by a following runtime over HTTP."""
    from mint.runtime.server import ServerThread
    from mint.runtime.service import open_runtime

    files = demo_files(tmp_path_factory)
    root = tmp_path_factory.mktemp("traced")
    with database(request.param) as url:
        repo, _ = api.init(root / "repo", url)
        ids = committed_demo(repo, files, root / "set")
        runtime = open_runtime(repo, "macaron@production", str(files.base), poll_interval=0.05)
        runtime.follow()
        try:
            with (
                ServerThread(runtime) as base_url,
                httpx.Client(base_url=base_url, timeout=120) as client,
            ):
                yield client, runtime, repo, ids
        finally:
            runtime.close()
            repo.close()


def ask(client, text="please fix the python bug", **extra):
    body = {"model": "macaron", "messages": [{"role": "user", "content": text}], **extra}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def trace_of(repo, runtime, trace_id):
    runtime.recorder.flush()
    found = [t for t in api.traces_ls(repo, limit=None) if t.id == trace_id]
    assert len(found) == 1, trace_id
    return found[0]


def test_a_turn_is_traced_under_its_completion_id_and_takes_feedback(served):
    client, runtime, repo, ids = served
    body = ask(client, user="ann")
    spec = api.set_spec(repo, ids["set"])
    ok = client.post("/v1/feedback", json={"id": body["id"], "score": 0.25, "label": "agent"})
    assert ok.status_code == 200 and ok.json() == {"ok": True}
    t = trace_of(repo, runtime, body["id"])
    assert t.label == body["mint"]["route"] == "coding"
    assert t.set_commit == ids["set"] and t.set_line == "macaron" and t.variant == "production"
    assert t.expert_commit == spec.experts["coding"].commit_id
    assert set(t.probs) == set(spec.labels) and abs(sum(t.probs.values()) - 1) < 1e-6
    assert max(t.probs, key=t.probs.get) == "coding"
    assert {"route", "answer", "summary", "total"} <= set(t.latency)
    assert t.latency["total"] >= t.latency["answer"] > 0
    assert t.user == "ann" and t.messages[-1]["content"] == "please fix the python bug"
    assert t.response == body["choices"][0]["message"]["content"]
    assert (t.score, t.feedback_label) == (0.25, "agent")
    assert [x.id for x in api.traces_ls(repo, set_rev="macaron@production")][:1] == [t.id]


def test_a_streamed_turn_is_traced_too(served):
    client, runtime, repo, _ = served
    body = {
        "model": "macaron",
        "messages": [{"role": "user", "content": "book a flight and send email"}],
        "stream": True,
        "user": "bo",
    }
    chunks = []
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunks.append(json.loads(line[6:]))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    t = trace_of(repo, runtime, chunks[0]["id"])
    assert t.label == "agent" and t.response == text and t.user == "bo"
    fed = client.post("/v1/feedback", json={"id": t.id, "score": 1})
    assert fed.status_code == 200


def test_feedback_refuses_unknown_ids_and_bad_bodies(served):
    client, runtime, repo, _ = served
    unknown = client.post("/v1/feedback", json={"id": "chatcmpl-unknown", "score": 1})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "trace_not_found"
    known = ask(client)["id"]
    runtime.recorder.flush()
    before = snapshot(repo)
    for bad in (
        {"id": known, "score": 1.5},
        {"id": known, "score": "good"},
        {"id": known},
        {"score": 1},
        {"id": known, "score": 1, "label": "nobody"},
        [known, 1],
    ):
        response = client.post("/v1/feedback", json=bad)
        assert response.status_code == 400, (bad, response.text)
        assert response.json()["error"]["message"]
    assert client.post("/v1/feedback", content=b"{oops").status_code == 400
    assert snapshot(repo) == before


def test_no_trace_content_keeps_no_messages(served):
    from mint.runtime.service import recorder_for

    client, runtime, repo, _ = served
    kept, runtime.recorder = runtime.recorder, recorder_for(repo, content=False)
    try:
        body = ask(client, text="hello there friend", user="cy")
        t = trace_of(repo, runtime, body["id"])
    finally:
        runtime.recorder.close()
        runtime.recorder = kept
    assert t.messages is None and t.response is None
    assert t.label == body["mint"]["route"] and t.user == "cy" and t.probs


class Release(Exception):
    pass


def test_a_locked_database_neither_fails_nor_holds_requests(served):
    client, runtime, repo, _ = served
    recorder = runtime.recorder
    written = recorder.written
    with contextlib.suppress(Release), repo.db.write() as conn:  # SQLite: BEGIN IMMEDIATE
        if repo.db.dialect == "postgresql":
            conn.exec_driver_sql("LOCK TABLE traces IN ACCESS EXCLUSIVE MODE")
        answered = [ask(client, user=f"locked-{i}")["id"] for i in range(4)]
        assert recorder.written == written  # nothing could be written meanwhile
        raise Release  # roll back: the lock goes
    deadline = time.monotonic() + 60
    while recorder.written < written + 4:
        assert time.monotonic() < deadline, recorder.stats()
        time.sleep(0.02)
    assert {t.id for t in api.traces_ls(repo, limit=None)} >= set(answered)


def test_an_unreachable_database_fails_no_request(served):
    from mint.db import Database
    from mint.runtime.service import recorder_for

    client, runtime, repo, _ = served
    nowhere = dataclasses.replace(repo, db=Database("postgresql+psycopg://mint@127.0.0.1:1/x"))
    kept, runtime.recorder = runtime.recorder, recorder_for(nowhere)
    runtime.recorder.close_wait = 0.5
    try:
        ids = [ask(client, user="dee")["id"] for _ in range(3)]
        deadline = time.monotonic() + 60
        while runtime.recorder.retries < 1:  # tried, and kept to try again later
            assert time.monotonic() < deadline, runtime.recorder.stats()
            time.sleep(0.02)
        refused = client.post("/v1/feedback", json={"id": ids[0], "score": 1})
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        traces = client.get("/healthz").json()["traces"]
        assert (traces["pending"], traces["failed"], traces["dropped"]) == (3, 0, 0), traces
    finally:
        runtime.recorder.close()  # the database never came back: counted as failed
        assert runtime.recorder.failed == 3
        runtime.recorder = kept
    assert ask(client)["id"]  # the server serves on
