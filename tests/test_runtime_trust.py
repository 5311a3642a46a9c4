"""What `mint serve` owes the people who run it (issue 19, items 14, 16, 17 and 7), through
real `mint serve` processes on the tiny base, a real `mint registry serve`, and both databases
where the recorder alone is at stake:

- one bad trace row (a lone surrogate, a NUL, a duplicate id, an unknown set commit) costs
  only itself, never its batch-mates, locally and through a registry; the queue is bounded in
  bytes;
- SIGTERM lets requests in flight finish and writes every queued trace, then exits 0;
- `--token-env NAME` and `--registry-tokens` make every endpoint but /healthz take a bearer
  token; feedback records who gave it, once per completion and caller; listening beyond this
  machine with no token prints a warning;
- `GET /api/v1/datasets/{id}` refuses a token limited to lines that do not hold its traces.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid

import pytest
import sqlalchemy as sa

from mint import api
from mint import schema as s
from mint.db import sqlite_url
from mint.ids import utcnow
from mint.remote.repo import RemoteRepo
from mint.runtime.service import recorder_for

from support import wait_until
from support.disk import SmallDisk, empty_wal, mountable, read_only
from support.loop import build_set
from support.registry import create_token, error_of, running_registry
from support.serving import raw_chat, start_serve

SECRET = "s3cret-" + uuid.uuid4().hex


@pytest.fixture
def local(tmp_path, models):
    """macaron@production in a repository on SQLite: (repo, ids)."""
    repo, _ = api.init(tmp_path / "repo")
    ids = build_set(repo, models, tmp_path)
    api.promote(repo, ids["set"], "production", by="alice")
    yield repo, ids
    repo.close()


@contextlib.contextmanager
def traces_held(repo):
    """Hold the SQLite database's write lock (BEGIN IMMEDIATE): the server's recorder tries
    a batch, waits a second for the lock, keeps it and tries again every half second until
    the block ends, so rows gather in its queue."""
    with contextlib.suppress(_Release), repo.db.write():
        yield
        raise _Release  # roll back: the lock goes


class _Release(Exception):
    pass


def stored_ids(repo) -> set[str]:
    return {t.id for t in api.traces_ls(repo, limit=None)}


# --- 14: a bad row costs only itself ---------------------------------------------------------


def trace(commit: str, **fields) -> dict:
    """A trace row as a server records it, served by COMMIT on macaron@production."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
        "at": utcnow(),
        "set_line": "macaron",
        "set_commit": commit,
        "variant": "production",
        "label": "chat",
        "probs": {"chat": 0.9, "coding": 0.1},
        "expert_commit": None,
        "user": "dee",
        "messages": [{"role": "user", "content": "hello"}],
        "response": "hi",
        "latency": {"total": 0.01},
        **fields,
    }


def test_the_recorder_drops_only_the_rows_that_cannot_be_stored(repo, models, tmp_path):
    ids = build_set(repo, models, tmp_path)
    first = trace(ids["set"])
    api.write_traces(repo, [first])
    recorder = recorder_for(repo)
    recorder.interval = 3600  # only the flush below writes
    good = [trace(ids["set"]) for _ in range(3)]
    surrogate = trace(ids["set"], user="\ud800", response="a\ud83d b")
    nul = trace(ids["set"], messages=[{"role": "user", "content": "a\x00b"}])
    again = trace(ids["set"], id=first["id"])  # an id recorded already: refused alone
    try:
        for row in (good[0], surrogate, good[1], nul, again, good[2]):
            assert recorder.record(row)
        assert recorder.flush() == 5
    finally:
        recorder.close()
    stats = recorder.stats()
    assert (stats["written"], stats["invalid"], stats["failed"]) == (5, 1, 0), stats
    found = {t.id: t for t in api.traces_ls(repo, limit=None)}
    assert set(found) == {first["id"], surrogate["id"], nul["id"], *(r["id"] for r in good)}
    assert found[surrogate["id"]].user == "\ufffd"  # kept, with what no column holds replaced
    assert found[surrogate["id"]].response == "a\ufffd b"
    assert found[nul["id"]].messages == [{"role": "user", "content": "a\ufffdb"}]


def test_the_trace_queue_is_bounded_in_bytes(repo, monkeypatch):
    recorder = recorder_for(repo)
    recorder.interval = 3600  # nothing is written while the rows are queued
    big = "x" * (1 << 20)
    try:
        kept = [recorder.record(trace("ab" * 32, response=big)) for _ in range(100)]
        stats = recorder.stats()
        assert kept.count(False) == stats["dropped"] >= 30, stats  # not 10,000 rows of 1 MB
        assert stats["pending_bytes"] <= 64 << 20 and kept[0]
    finally:
        slept: list[float] = []
        monkeypatch.setattr("time.sleep", slept.append)
        recorder.close()
        monkeypatch.undo()
    # close wrote what waited and stopped: it waits only while rows wait (it used to wait an
    # interval after writing them all, here its whole close_wait)
    assert recorder.written == kept.count(True) and slept == []


def test_a_full_disk_keeps_the_queue_within_its_bound_until_space_returns(tmp_path):
    """The recorder on a database whose disk is full (a small tmpfs; where this process may
    not mount one, the database made read-only, which SQLite refuses alike): rows wait within
    the queue's bound (later ones are dropped and counted) and are written once space
    returns."""
    folder = tmp_path / "db"
    disk = SmallDisk(folder, "8m") if mountable() else None
    # Root is bound by no permission: it needs the tmpfs (CAP_SYS_ADMIN, as CI's machine has).
    assert disk is not None or os.geteuid() != 0, (
        "run as a user other than root, or as root that may mount a tmpfs: no full disk here"
    )
    folder.mkdir(exist_ok=True)
    repo, _ = api.init(tmp_path / "repo", sqlite_url(folder / "mint.db"))
    recorder = recorder_for(repo)
    recorder.max_pending, recorder.interval = 10, 0.05
    rows = [trace("ab" * 32) for _ in range(25)]
    try:
        if disk is not None:
            empty_wal(folder / "mint.db")
            disk.fill()
        else:
            read_only(folder, True)
        kept = [recorder.record(row) for row in rows]
        wait_until(lambda: recorder.retries >= 2, "never tried")
        assert kept == [True] * 10 + [False] * 15
        assert (recorder.pending(), recorder.written, recorder.dropped) == (10, 0, 15)
    finally:
        disk.free() if disk is not None else read_only(folder, False)
    wait_until(lambda: recorder.pending() == 0, "never written")
    recorder.close()
    assert stored_ids(repo) == {row["id"] for row in rows[:10]}
    assert (recorder.written, recorder.failed) == (10, 0)
    repo.close()
    if disk is not None:
        disk.close()


def test_a_bad_turn_does_not_lose_its_batch_mates_traces(local, models, tmp_path):
    repo, ids = local
    served = start_serve(str(repo.root), models["base"], tmp_path / "serve")
    try:
        with served.client() as client, traces_held(repo):
            plug = raw_chat(client, "hello there")  # its batch waits for the lock...
            assert plug.status_code == 200, plug.text
            wait_until(lambda: served.health()["traces"]["retries"] >= 1, "no batch tried")
            texts = [f"fix the python bug {i}" for i in range(6)]
            bad = [("hello", {"user": "\ud800"}), ("hi", {"user": "a\x00b"})]
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                asked = [pool.submit(raw_chat, client, t) for t in texts]
                asked += [pool.submit(raw_chat, client, t, **extra) for t, extra in bad]
                answers = [a.result() for a in asked]
            good = [a.json()["id"] for a in answers[:6] if a.status_code == 200]
            assert len(good) == 6, [a.text for a in answers[:6]]
            answered = [a.json()["id"] for a in answers if a.status_code == 200]
            # ...so that every answered turn waits in the queue, the plug's too, for one batch
            queued = len(answered) + 1
            wait_until(lambda: served.health()["traces"]["pending"] == queued, "not queued")
        # feedback writes what is queued first
        fed = served.client().post("/v1/feedback", json={"id": good[0], "score": 1})
        assert fed.status_code == 200, fed.text
        stored = stored_ids(repo)
        assert set(good) <= stored, f"lost {len(set(good) - stored)} of {len(good)}"
        health = served.health()["traces"]
        # a bad turn that was answered is stored with its text made storable, or dropped alone
        assert len(set(answered) - stored) == health["invalid"]
        metrics = served.client().get("/metrics").text
        assert f'mint_traces_total{{outcome="invalid"}} {health["invalid"]}' in metrics
        assert 'mint_traces_total{outcome="written"}' in metrics
    finally:
        assert served.stop() == 0, served.output()[-3000:]


@pytest.fixture
def registry_set(repo, models, tmp_path):
    """macaron@production behind a real registry, with tokens: (registry, tokens, ids)."""
    ids = build_set(repo, models, tmp_path)
    api.promote(repo, ids["set"], "production", by="alice")
    roles = {"server": "writer", "rita": "reader", "walt": "writer"}
    tokens = {name: create_token(repo.root, name, role) for name, role in roles.items()}
    tokens["chatty"] = create_token(repo.root, "chatty", "writer", ("chat*",))
    tokens["mac"] = create_token(repo.root, "mac", "reader", ("mac*",))
    with running_registry(repo.root) as registry:
        yield registry, tokens, ids


def test_the_registry_skips_bad_rows_when_asked_and_names_them(registry_set, repo):
    registry, tokens, ids = registry_set

    def row(**fields):
        return {**trace(ids["set"], **fields), "at": utcnow().isoformat()}

    rows = [row(), row(response="a\x00b"), row(set_commit="ab" * 32), row(), row(id="x" * 65)]
    with registry.client(tokens["walt"]) as walt:
        r = walt.post("/api/v1/traces", json={"rows": rows, "invalid": "skip"})
        assert r.status_code == 200, r.text
        assert r.json()["written"] == 2
        assert [s["row"] for s in r.json()["skipped"]] == [1, 2, 4]
        assert all(s["why"] for s in r.json()["skipped"])
        # by default a bad row still refuses its batch whole, naming it
        whole = walt.post("/api/v1/traces", json={"rows": [row(), row(response="\x00")]})
        assert "rows.1" in error_of(whole, 400, "InvalidTraces")["message"]
    assert stored_ids(repo) == {rows[0]["id"], rows[3]["id"]}


def test_a_registry_backed_recorder_keeps_the_good_rows(registry_set, repo, tmp_path):
    registry, tokens, ids = registry_set
    walt = RemoteRepo(registry.url, tokens["walt"], cache=tmp_path / "walt")
    recorder = recorder_for(walt)
    recorder.interval = 3600
    good = [trace(ids["set"]) for _ in range(3)]
    nul = trace(ids["set"], response="a\x00b")
    surrogate = trace(ids["set"], messages=[{"role": "user", "content": "\ud800"}])
    unknown = trace("ab" * 32)  # no such set commit: the registry skips it alone
    try:
        for row in (good[0], nul, unknown, good[1], surrogate, good[2]):
            assert recorder.record(row)
        assert recorder.flush() == 5
    finally:
        recorder.close()
        walt.close()
    stats = recorder.stats()
    assert (stats["written"], stats["invalid"], stats["failed"]) == (5, 1, 0), stats
    found = {t.id: t for t in api.traces_ls(repo, limit=None)}
    assert set(found) == {nul["id"], surrogate["id"], *(r["id"] for r in good)}
    assert found[nul["id"]].response == "a\ufffdb"


# --- 16: SIGTERM drains and flushes ----------------------------------------------------------


def test_sigterm_finishes_requests_writes_every_trace_and_exits_0(local, models, tmp_path):
    repo, _ = local
    served = start_serve(str(repo.root), models["base"], tmp_path / "serve", "--host", "0.0.0.0")
    answered: list[str] = []
    try:
        with served.client() as client, traces_held(repo):
            r = raw_chat(client, "hello there")
            assert r.status_code == 200, r.text
            answered.append(r.json()["id"])
            wait_until(lambda: served.health()["traces"]["retries"] >= 1, "no batch tried")
            for i in range(5):  # these wait in the queue while the first batch waits
                r = raw_chat(client, f"fix the python bug {i}")
                assert r.status_code == 200, r.text
                answered.append(r.json()["id"])
            body = {
                "model": "macaron",
                "messages": [{"role": "user", "content": "tell me more"}],
                "stream": True,
                "max_tokens": 16,
            }
            with client.stream("POST", "/v1/chat/completions", json=body) as stream:
                lines = stream.iter_lines()
                first = next(line for line in lines if line.startswith("data: {"))
                os.kill(served.process.pid, signal.SIGTERM)  # a turn is in flight
                rest = list(lines)
            events = [line for line in rest if line]
            assert stream.status_code == 200 and events[-1] == "data: [DONE]", events[-3:]
            answered.append(json.loads(first[6:])["id"])
        code = served.process.wait(120)
    finally:
        served.stop(signal.SIGKILL)
    assert code == 0, served.output()[-3000:]
    assert "stopped on SIGTERM" in served.output()
    stored = stored_ids(repo)
    assert set(answered) <= stored, f"lost {len(set(answered) - stored)} of {len(answered)}"
    # it listened on every address with no token: it said so when it started
    assert "warning: serving on 0.0.0.0 with no token" in served.output()


# --- 17: tokens, who gave feedback, and how much ---------------------------------------------


def test_a_token_is_needed_and_feedback_records_who_gave_it_once(local, models, tmp_path):
    repo, _ = local
    env = {"MINT_SERVE_TOKEN": SECRET}
    args = ("--host", "0.0.0.0", "--token-env", "MINT_SERVE_TOKEN")
    served = start_serve(str(repo.root), models["base"], tmp_path / "serve", *args, env=env)
    try:
        assert "no token" not in served.output()  # a token is needed: no warning
        with served.client() as anyone, served.client("wrong") as wrong:
            for client in (anyone, wrong):
                for method, path in (
                    ("GET", "/v1/models"),
                    ("GET", "/metrics"),
                    ("POST", "/v1/chat/completions"),
                    ("POST", "/v1/feedback"),
                ):
                    r = client.request(method, path, json={})
                    assert r.status_code == 401, (method, path, r.text)
                    assert r.json()["error"]["code"] in ("missing_token", "invalid_api_key")
            assert raw_chat(anyone, "hello").status_code == 401
            assert anyone.get("/healthz").status_code == 200
        with served.client(SECRET) as client:
            answer = raw_chat(client, "fix the python bug")
            assert answer.status_code == 200, answer.text
            trace_id = answer.json()["id"]
            for i in range(20):  # one caller, one completion: the latest replaces the others
                fed = client.post("/v1/feedback", json={"id": trace_id, "score": i / 20})
                assert fed.status_code == 200, fed.text
            assert client.get("/metrics").status_code == 200
    finally:
        assert served.stop() == 0
    with repo.db.read() as conn:
        rows = conn.execute(
            sa.select(s.feedback.c.by, s.feedback.c.score).where(s.feedback.c.trace_id == trace_id)
        ).all()
    assert len(rows) == 1, rows
    by, score = rows[0]
    assert by and by.startswith("token-") and SECRET not in by and score == 19 / 20
    assert [t.score for t in api.traces_ls(repo, limit=None) if t.id == trace_id] == [0.95]
    assert SECRET not in served.output()


def test_a_token_env_that_is_not_set_is_a_usage_error(local, models, tmp_path):
    repo, _ = local
    argv = [sys.executable, "-m", "mint", "--repo", str(repo.root), "serve", "macaron@production"]
    argv += ["--base-dir", str(models["base"]), "--token-env", "MINT_NO_SUCH_VARIABLE_X"]
    env = {k: v for k, v in os.environ.items() if k != "MINT_NO_SUCH_VARIABLE_X"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2, done
    assert "MINT_NO_SUCH_VARIABLE_X" in done.stderr and "Traceback" not in done.stderr


def test_registry_tokens_are_checked_against_the_registry(registry_set, repo, models, tmp_path):
    registry, tokens, ids = registry_set
    env = {"MINT_TOKEN": tokens["server"]}
    served = start_serve(
        registry.url, models["base"], tmp_path / "serve", "--registry-tokens", env=env
    )
    try:
        with served.client("bogus") as bogus:
            assert raw_chat(bogus, "hello").status_code == 401
        with served.client(tokens["chatty"]) as chatty:  # limited to chat*: not macaron
            refused = raw_chat(chatty, "hello")
            assert refused.status_code == 403, refused.text
        with served.client(tokens["rita"]) as rita, served.client(tokens["walt"]) as walt:
            answer = raw_chat(rita, "fix the python bug")
            assert answer.status_code == 200, answer.text
            trace_id = answer.json()["id"]
            fed = rita.post("/v1/feedback", json={"id": trace_id, "score": 1})
            assert fed.status_code == 403, fed.text  # the registry's rule: feedback takes a writer
            for score in (0.1, 0.6):
                fed = walt.post("/v1/feedback", json={"id": trace_id, "score": score})
                assert fed.status_code == 200, fed.text
    finally:
        assert served.stop() == 0, served.output()[-3000:]
    with repo.db.read() as conn:
        rows = conn.execute(
            sa.select(s.feedback.c.by, s.feedback.c.score).where(s.feedback.c.trace_id == trace_id)
        ).all()
    assert rows == [("walt", 0.6)]
    assert tokens["walt"] not in served.output() and tokens["server"] not in served.output()


# --- 7: a dataset is read by the tokens that may read its traces -----------------------------


def test_the_dataset_route_refuses_a_token_whose_lines_miss_its_traces(registry_set, tmp_path):
    registry, tokens, ids = registry_set
    walt = RemoteRepo(registry.url, tokens["walt"], cache=tmp_path / "walt")
    try:
        api.write_traces(walt, [trace(ids["set"]) for _ in range(2)])
        made = api.traces_export(walt, tmp_path / "all.jsonl", by="walt")  # no set named
    finally:
        walt.close()
    assert made.records == 2
    path = f"/api/v1/datasets/{made.id}"
    with registry.client(tokens["chatty"]) as chatty:
        assert "macaron" in error_of(chatty.get(path), 403, "Forbidden")["message"]
    for name in ("mac", "rita", "walt"):  # mac* covers macaron; the others have every line
        with registry.client(tokens[name]) as client:
            r = client.get(path)
            assert r.status_code == 200 and r.json()["id"] == made.id, (name, r.text)
