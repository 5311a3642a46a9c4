"""Traces through a registry: batches recorded and listed back, malformed batches refused
whole, roles and line globs, feedback, exports written here and checked against the dataset's
sha256, the recorder's answer to a refused token and to a registry out of reach, and a real
`mint --repo URL serve macaron@production` recording its turns and their feedback there."""

from __future__ import annotations

import hashlib
import logging
import uuid

import httpx
import pytest
import sqlalchemy as sa

from mint import api
from mint import schema as s
from mint.cli import run_in_process
from mint.errors import Forbidden, InvalidFeedback, TraceNotFound
from mint.ids import utcnow
from mint.remote.repo import RemoteRepo
from mint.runtime.service import recorder_for

from conftest import Result, one_line_error
from support import wait_until
from support.registry import create_token, error_of, running_registry
from support.serving import start_follower


@pytest.fixture
def served(two_sets, repo, tmp_path):
    """two_sets behind a registry; a RemoteRepo per token (chatty: a writer on chat* only)."""
    roles = {"rita": "reader", "walt": "writer"}
    tokens = {name: create_token(repo.root, name, role) for name, role in roles.items()}
    tokens["chatty"] = create_token(repo.root, "chatty", "writer", ("chat*",))
    with running_registry(repo.root) as registry:
        remotes = {n: RemoteRepo(registry.url, t, cache=tmp_path / n) for n, t in tokens.items()}
        yield registry, tokens, remotes, two_sets
        for remote in remotes.values():
            remote.close()


def row(commit: str, **fields) -> dict:
    """A trace row as a server records it, served by COMMIT on macaron@production."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "at": utcnow(),
        "set_line": "macaron",
        "set_commit": commit,
        "variant": "production",
        "label": "chat",
        "probs": {"chat": 0.9, "coding": 0.1},
        "expert_commit": None,
        "user": "dee",
        "messages": [{"role": "user", "content": "hello ☃"}],
        "response": "hi there",
        "latency": {"total": 0.01},
        **fields,
    }


def test_a_batch_is_recorded_listed_back_and_scored(served, repo):
    registry, tokens, remotes, ids = served
    rita, walt, chatty = remotes["rita"], remotes["walt"], remotes["chatty"]
    rows = [row(ids["set"]), row(ids["set"], label="coding"), row(ids["set2"], response=None)]
    assert api.write_traces(walt, rows) == 3
    assert api.write_traces(walt, rows) == 0  # sent again after a lost answer: nothing twice
    listed = api.traces_ls(rita, set_rev="macaron", limit=None)
    assert listed == api.traces_ls(repo, limit=None)
    assert sorted(t.id for t in listed) == sorted(r["id"] for r in rows)
    assert [t.id for t in api.traces_ls(rita, set_rev=ids["set2"])] == [rows[2]["id"]]
    assert [t.id for t in api.traces_ls(rita, label="coding")] == [rows[1]["id"]]
    assert listed[-1].messages == [{"role": "user", "content": "hello ☃"}]

    scored = api.record_feedback(walt, rows[0]["id"], 0.75, "coding", by="someone-else")
    assert (scored.score, scored.feedback_label) == (0.75, "coding")
    assert [t.id for t in api.traces_ls(rita, min_score=0.5)] == [rows[0]["id"]]
    with repo.db.read() as conn:
        assert conn.execute(sa.select(s.feedback.c.by)).scalars().all() == ["walt"]
    with pytest.raises(TraceNotFound):
        api.record_feedback(walt, "chatcmpl-nope", 1.0)
    with pytest.raises(InvalidFeedback):
        api.record_feedback(walt, rows[0]["id"], 1.5)
    with pytest.raises(InvalidFeedback, match="not one of the set's labels"):
        api.record_feedback(walt, rows[0]["id"], 1.0, "summary-of-nothing")
    with pytest.raises(Forbidden, match="the token is reader"):
        api.record_feedback(rita, rows[0]["id"], 1.0)
    with pytest.raises(Forbidden, match="the token is reader"):
        api.write_traces(rita, [row(ids["set"])])

    assert api.traces_ls(chatty) == []  # macaron is outside chat*
    with pytest.raises(Forbidden, match="outside the token's lines"):
        api.traces_ls(chatty, set_rev="macaron")
    with pytest.raises(Forbidden, match="outside the token's lines"):
        api.write_traces(chatty, [row(ids["set"])])
    with pytest.raises(Forbidden, match="outside the token's lines"):
        api.record_feedback(chatty, rows[0]["id"], 1.0)
    assert len(api.traces_ls(repo, limit=None)) == 3


def test_a_malformed_batch_is_refused_whole(served, repo):
    registry, tokens, remotes, ids = served
    bad_rows = {
        "no set commit": {"set_commit": None},
        "an unknown commit": {"set_commit": "ab" * 32},
        "another line": {"set_line": "chat"},
        "an adapter's line": {"set_commit": ids["chat"], "set_line": "chat"},
        "a long id": {"id": "x" * 65},
        "a text latency": {"latency": {"total": "fast"}},
        "a NUL": {"response": "a\x00b"},
        "a bad time": {"at": "yesterday"},
        "an extra field": {"by": "mallory"},
        "a list of messages that is not": {"messages": "hello"},
    }
    with registry.client(tokens["walt"]) as walt, registry.client(tokens["rita"]) as rita:
        for why, change in bad_rows.items():
            fine = {**row(ids["set"]), "at": utcnow().isoformat()}
            rows = [fine, {**row(ids["set"]), "at": utcnow().isoformat(), **change}]
            answer = walt.post("/api/v1/traces", json={"rows": rows})
            assert "rows.1" in error_of(answer, 400, "InvalidTraces")["message"], why
        same = {**row(ids["set"]), "at": utcnow().isoformat()}
        error_of(walt.post("/api/v1/traces", json={"rows": [same, same]}), 400, "InvalidTraces")
        many = [{**row(ids["set"]), "at": utcnow().isoformat()} for _ in range(1001)]
        error_of(walt.post("/api/v1/traces", json={"rows": many}), 422, "InvalidRequest")
        fine = {**row(ids["set"]), "at": utcnow().isoformat()}
        error_of(rita.post("/api/v1/traces", json={"rows": [fine]}), 403, "Forbidden")
        feedback = {"id": fine["id"], "score": "high"}
        error_of(walt.post("/api/v1/traces/feedback", json=feedback), 404, "TraceNotFound")
    assert api.traces_ls(repo, limit=None) == []


def test_export_and_dataset_show_through_the_registry(served, repo, tmp_path, monkeypatch):
    registry, tokens, remotes, ids = served
    rows = [row(ids["set"]), row(ids["set"], response="ünïcode ✓"), row(ids["set"])]
    api.write_traces(remotes["walt"], rows)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def mint(token: str, *args: str) -> Result:
        monkeypatch.setenv("MINT_TOKEN", tokens[token])
        return Result(*run_in_process(["--repo", registry.url, *args]))

    r = mint("walt", "traces", "feedback", rows[1]["id"], "0.9", "--json")
    assert r.code == 0 and r.json()["score"] == 0.9, r
    out = tmp_path / "out" / "chat.jsonl"
    r = mint("walt", "traces", "export", "--set", "macaron", "-o", str(out), "--json")
    assert r.code == 0, r
    made = r.json()
    assert hashlib.sha256(out.read_bytes()).hexdigest() == made["id"]
    assert made["records"] == 3 and made["created_by"] == "walt" and made["path"] == str(out)
    with repo.store.open(made["id"]) as kept:  # the registry keeps the bytes
        assert kept.read() == out.read_bytes()
    shown = mint("rita", "dataset", "show", made["id"][:12], "--json")
    assert shown.code == 0, shown
    local = api.dataset_show(repo, made["id"])
    assert shown.json() == {**made, "path": None} and local.records == 3
    r = mint("rita", "traces", "ls", "--min-score", "0.5", "--json")
    assert r.code == 0 and [t["id"] for t in r.json()] == [rows[1]["id"]], r

    one_line_error(mint("rita", "traces", "export", "-o", str(tmp_path / "x.jsonl")), "reader")
    one_line_error(mint("chatty", "traces", "export", "-o", str(tmp_path / "y.jsonl")), "set")
    one_line_error(mint("rita", "dataset", "show", "abcdef0"), "no dataset")
    one_line_error(mint("walt", "traces", "feedback", "chatcmpl-nope", "1"), "no trace")
    assert not (tmp_path / "x.jsonl").exists() and not (tmp_path / "y.jsonl").exists()


def test_the_recorder_drops_on_a_refused_token_and_waits_out_an_outage(served, caplog):
    registry, tokens, remotes, ids = served
    refused = recorder_for(remotes["rita"])
    with caplog.at_level(logging.WARNING, logger="mint.runtime"):
        for _ in range(3):
            refused.record(row(ids["set"]))
        assert refused.flush() == 0
        assert not refused.record(row(ids["set"]))  # no more tries
        refused.close()
    warnings = [r for r in caplog.records if "no traces are recorded" in r.getMessage()]
    assert len(warnings) == 1 and "reader" in warnings[0].getMessage()
    assert refused.stats()["dropped"] == 4 and refused.stats()["written"] == 0

    outage = Outage()
    walt = RemoteRepo(registry.url, tokens["walt"], transport=outage)
    recorder = recorder_for(walt)
    recorder.interval = 3600  # only the flushes below write
    try:
        rows = [row(ids["set"]) for _ in range(3)]
        for r in rows:
            recorder.record(r)
        assert recorder.flush() == 0 and recorder.pending() == 3  # kept for the next try
        assert recorder.stats()["failed"] == recorder.stats()["dropped"] == 0
        outage.down = False
        assert recorder.flush() == 3 and recorder.written == 3
        listed = api.traces_ls(remotes["rita"], limit=None)
        assert sorted(t.id for t in listed) == sorted(r["id"] for r in rows)
    finally:
        recorder.close()
        walt.close()


class Outage(httpx.HTTPTransport):
    """A transport that cannot connect while `down`."""

    down = True

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        return super().handle_request(request)


# --- a production server following the registry --------------------------------------------


@pytest.mark.xdist_group("demo")
def test_a_following_server_records_turns_and_feedback_on_the_registry(macaron, tmp_path):
    repo, registry, token, sets, files = macaron
    api.promote(repo, sets[0], "production", by="tester")
    writer = create_token(repo.root, "server", "writer")
    follower = start_follower(registry.url, writer, "macaron@production", files.base, tmp_path)
    reader = RemoteRepo(registry.url, token)
    try:
        with httpx.Client(base_url=follower.url, timeout=120) as client:
            answered = []
            for text in ("please fix the python bug", "tell me a joke"):
                body = {"model": "macaron", "messages": [{"role": "user", "content": text}]}
                r = client.post("/v1/chat/completions", json={**body, "max_tokens": 2})
                assert r.status_code == 200, r.text
                answered.append(r.json()["id"])
            r = client.post("/v1/feedback", json={"id": answered[0], "score": 0.25})
            assert r.status_code == 200, r.text
            r = client.post("/v1/feedback", json={"id": "chatcmpl-nope", "score": 1})
            assert r.status_code == 404 and r.json()["error"]["code"] == "trace_not_found"
            r = client.post("/v1/feedback", json={"id": answered[1], "score": 7})
            assert r.status_code == 400, r.text
        wait_until(
            lambda: len(api.traces_ls(reader, set_rev="macaron")) == 2, "no traces came", 60
        )
        found = {t.id: t for t in api.traces_ls(reader, set_rev="macaron")}
        assert set(found) == set(answered)
        assert found[answered[0]].score == 0.25 and found[answered[1]].score is None
        assert {t.set_commit for t in found.values()} == {sets[0]}
        assert {t.variant for t in found.values()} == {"production"}
        assert found[answered[1]].messages == [{"role": "user", "content": "tell me a joke"}]
        assert follower.health()["traces"]["refused"] is None
    finally:
        follower.stop()
        reader.close()
