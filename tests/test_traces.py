"""Traces, feedback and dataset exports: the library and `mint traces` on both databases, then
the real server recording turns and taking feedback (POST /v1/feedback)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid

import pytest

from mint import api
from mint.errors import DatasetNotFound, InvalidFeedback, InvalidTime, TraceNotFound
from mint.runtime.evaluate import read_records

from conftest import one_line_error, snapshot

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


@pytest.fixture
def based(mint, models):
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    return mint
