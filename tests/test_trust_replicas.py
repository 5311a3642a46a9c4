"""The registry's promises of issue 19 hold on two replicas over one PostgreSQL database.

Two real `mint registry serve` processes share one PostgreSQL repository (shared by every test
of this module: starting them is the expensive part). Each check writes through one door and
reads the outcome through the other, so a refusal cannot be a replica's private state:

- 1: a contract version in disguise (`2.0`, `"2"`) is refused at push; the gate still guards;
- 2: a set whose member lies outside a `coding*` token's lines is refused at push, and its
  objects and Hub files are refused to a `coding*` reader;
- 3: a bad evaluation by push is a 422, and the commit's gate still answers;
- 4: a tag may not take the name of a channel a contract guards;
- 5: a canary start takes the gate; an admin forces it with a reason;
- 7: a dataset is refused to a token whose lines miss its traces;
- 11: a typo of a known channel asks `did you mean`, and makes nothing;
- 12: of eight simultaneous approvals by one identity, over both replicas, one says `created`.
"""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from mint import api
from mint import schema as s
from mint.cli import run_in_process
from mint.exchange import sending
from mint.ids import utcnow
from mint.remote.repo import RemoteRepo

from conftest import Result, one_line_error, snapshot
from support.loop import build_set
from support.pgdb import pg_database
from support.registry import Registry, create_token, error_of, start_registry

pytestmark = pytest.mark.xdist_group("registry")

CONTRACT = """
name = "production"
channel = "production"
approvals = 1
[[metric]]
name = "acc"
min = 0.5
"""
# What a writer wanted in: production guarded by nothing (no approvals, no line it covers).
NO_GATE = 'name = "production"\nchannel = "production"\nlines = ["nothing-matches"]\n'
ROLES = {"ada": "admin", "wanda": "writer", "max": "maintainer"}
LIMITED = {"cody": "writer", "lim": "reader"}  # both limited to coding*
REF = "macaron@production"
WEIGHTS = "adapter_model.safetensors"
MOL = """
name = "{name}"
protocol = "mol/1"
base = "tiny-llama"
[router]
adapter = "coding"
labels = ["chat", "coding"]
prompt = "route.md"
default = "chat"
[experts]
chat = "coding"
coding = "{coding}"
[summary]
adapter = "coding"
prompt = "route.md"
"""


def make_set(repo, folder: Path, name: str, coding: str) -> str:
    """A set on line NAME whose every member is `coding` but its coding expert, CODING."""
    (folder / name).mkdir()
    (folder / name / "mol.toml").write_text(MOL.format(name=name, coding=coding))
    (folder / name / "route.md").write_text("Route the request to one expert.\n")
    return api.set_commit(repo, folder / name / "mol.toml", name, author="carol").id


@dataclass
class Pair:
    repo: object  # the repository both replicas serve, opened here to look at its rows
    doors: list[Registry]  # two replicas
    ids: dict[str, str]
    tokens: dict[str, str]
    folder: Path
    monkeypatch: pytest.MonkeyPatch

    def http(self, door: int, who: str) -> httpx.Client:
        return self.doors[door % 2].client(self.tokens[who])

    def get(self, door: int, who: str, path: str, **params) -> httpx.Response:
        with self.http(door, who) as client:
            return client.get(path, params=params or None)

    def post(self, door: int, who: str, path: str, body: dict | str) -> httpx.Response:
        text = body if isinstance(body, str) else json.dumps(body)
        with self.http(door, who) as client:
            return client.post(path, content=text, headers={"Content-Type": "application/json"})

    def cli(self, who: str, *args) -> Result:
        with self.monkeypatch.context() as m:
            m.setenv("MINT_TOKEN", self.tokens[who])
            return Result(*run_in_process([str(a) for a in args]))


@pytest.fixture(scope="module")
def pair(tmp_path_factory, models):
    """macaron v1 holds protected production, guarded by contract `production` (acc >= 0.5,
    one approval); macaron v2 (a new chat commit) is unevaluated; line `secret` and the set
    `coding-evil` whose coding expert is secret's commit; two replicas over PostgreSQL."""
    with contextlib.ExitStack() as stack, pytest.MonkeyPatch.context() as mp:
        folder = tmp_path_factory.mktemp("trust-replicas")
        mp.setenv("XDG_CONFIG_HOME", str(folder / "config"))
        mp.setenv("XDG_CACHE_HOME", str(folder / "cache"))
        repo, _ = api.init(folder / "repo", stack.enter_context(pg_database()))
        stack.callback(repo.close)
        ids = build_set(repo, models, folder)
        api.promote(repo, ids["set"], "production", by="alice")
        (folder / "production.toml").write_text(CONTRACT)
        api.contract_add(repo, folder / "production.toml", by="ada")
        api.protect(repo, "production", by="ada")
        ids["chat2"] = api.commit(repo, "chat", models["a1"], "chat v2", author="mara").id
        ids["v2"] = api.set_commit(repo, ids.pop("folder") / "mol.toml", "v2", author="mara").id
        ids["secret"] = api.commit(repo, "secret", models["a1"], "secret", author="sam").id
        ids["evil"] = make_set(repo, folder, "coding-evil", "secret")
        tokens = {n: create_token(repo.root, n, role) for n, role in ROLES.items()}
        tokens |= {n: create_token(repo.root, n, r, ("coding*",)) for n, r in LIMITED.items()}
        doors = [start_registry(repo.root) for _ in range(2)]
        for door in doors:
            stack.callback(door.stop)
        yield Pair(repo, doors, ids, tokens, folder, mp)
        for door in doors:  # whatever a test sent, no replica answered with a traceback
            assert "Traceback" not in door.output(), door.output()[-3000:]


def evaluation(commit: str, *, version=1, toml=CONTRACT, metrics=None, **over) -> dict:
    """The wire form of one evaluation of COMMIT under contract production vVERSION."""
    return {
        "commit": commit,
        "contract": {"name": "production", "version": version, "source": toml},
        "metrics": {"acc": 0.9} if metrics is None else metrics,
        "source": "manual",
        "evaluator": None,
        "data_hash": None,
        "by": "wanda",
        "at": utcnow().isoformat(),
        **over,
    }


def gate_still_guards(pair: Pair, door: int) -> None:
    """Through DOOR: production's gate holds contract production v1 only, and refuses the
    unevaluated chat v2, so a maintainer's promote of it is refused."""
    gate = pair.get(door, "max", "/api/v1/gate", rev=pair.ids["chat2"], channel="production")
    assert gate.status_code == 200, gate.text
    assert gate.json()["contracts"] == ["production@v1"] and gate.json()["ok"] is False
    versions = pair.get(door, "max", "/api/v1/contracts").json()
    assert [(c["name"], c["version"]) for c in versions] == [("production", 1)]
    body = {"rev": pair.ids["chat2"], "channel": "production"}
    error_of(pair.post(door, "max", "/api/v1/promote", body), 409, "GateRefused")
    lost = pair.get(door, "max", "/api/v1/resolve", rev="chat@production")
    error_of(lost, 404, "RevisionNotFound")


# --- 1: a contract version is a positive integer in every form it arrives in ------------------


@pytest.mark.parametrize("door", [0, 1])
@pytest.mark.parametrize("version", ["2.0", '"2"'])
def test_a_contract_version_in_disguise_cannot_switch_off_the_gate(pair, version, door):
    wire = evaluation(pair.ids["chat2"], version="__V__", toml=NO_GATE, metrics={})
    text = json.dumps({"evaluations": [wire]}).replace('"__V__"', version)
    error = error_of(pair.post(door, "wanda", "/api/v1/objects", text), 422, "InvalidObject")
    assert "contract version" in error["message"]
    gate_still_guards(pair, door + 1)


# --- 2: line limits hold through sets, on both replicas ---------------------------------------


def test_a_set_reaching_beyond_a_token_s_lines_is_refused_by_both_doors(pair):
    for door in (0, 1):
        path = "/api/v1/lines/coding-evil/objects"
        error_of(pair.get(door, "lim", path), 403, "Forbidden")
        assert pair.get(door, "ada", path).status_code == 200
        hub = f"/coding-evil/resolve/main/coding/{WEIGHTS}"
        assert pair.get(door, "lim", hub).status_code == 403
        assert pair.get(door, "ada", hub).status_code == 200


def laptop_with_an_evil_set(pair: Pair, models) -> tuple[object, str]:
    """A laptop that fetched `secret` and `coding` (an admin's token), and made the set
    `coding-evil2` whose coding expert is secret's commit: (the laptop, the set's id)."""
    laptop, _ = api.init(pair.folder / "laptop")
    for line in ("secret", "coding"):
        fetched = pair.cli("ada", "--repo", laptop.root, "fetch", pair.doors[1].url, line)
        assert fetched.code == 0, fetched
    api.base_add(laptop, "tiny-llama", models["base"])
    return laptop, make_set(laptop, pair.folder, "coding-evil2", "secret")


def push_raw(pair: Pair, door: int, who: str, laptop, cid: str) -> httpx.Response:
    """What an adversary sends: COMMIT's blobs, then the commit alone by POST /objects."""
    with laptop.db.read() as conn:
        wire = sending.commit_wire(conn, cid)
    with pair.http(door, who) as client:
        for blob, _size in wire["files"].values():
            with laptop.store.open(blob) as f:
                assert client.put(f"/api/v1/blobs/{blob}", content=f.read()).status_code < 300
    return pair.post(door, who, "/api/v1/objects", {"commits": [wire]})


def test_a_limited_writer_cannot_push_such_a_set_and_its_reads_stay_refused(pair, models):
    laptop, evil = laptop_with_an_evil_set(pair, models)
    try:
        push = ("--repo", laptop.root, "push", pair.doors[0].url, "coding-evil2")
        assert "secret" in one_line_error(pair.cli("cody", *push))
        refused = error_of(push_raw(pair, 1, "cody", laptop, evil), 403, "Forbidden")
        assert "secret" in refused["message"]
        for door in (0, 1):  # nothing of it is on either replica
            error_of(pair.get(door, "ada", f"/api/v1/commits/{evil}"), 404, "RevisionNotFound")
        # A token that may read every member's line pushes it through one door; a coding*
        # reader is refused its objects and files through the other.
        pushed = pair.cli("wanda", *push)
        assert pushed.code == 0, pushed
    finally:
        laptop.close()
    path = "/api/v1/lines/coding-evil2/objects"
    listed = pair.get(1, "ada", path)
    assert {c["line"] for c in listed.json()["commits"]} == {"coding", "coding-evil2", "secret"}
    error_of(pair.get(1, "lim", path), 403, "Forbidden")
    assert pair.get(1, "lim", f"/coding-evil2/resolve/main/coding/{WEIGHTS}").status_code == 403


# --- 3: a bad evaluation by push is refused, and the commit's gate still answers --------------


def test_bad_evaluations_by_push_are_refused_and_the_gate_still_answers(pair):
    unknown = "ab" * 32
    chat2 = pair.ids["chat2"]
    bad = [
        (evaluation(chat2, metrics={"acc": "high"}), "EvaluationFailed"),
        (evaluation(chat2, source="oracle"), "EvaluationFailed"),
        (evaluation(unknown), "MissingObjects"),
    ]
    for door, (ev, kind) in enumerate(bad):
        error_of(pair.post(door, "wanda", "/api/v1/objects", {"evaluations": [ev]}), 422, kind)
        other = door + 1
        gate = pair.get(other, "wanda", "/api/v1/gate", rev=chat2, channel="production")
        assert gate.status_code == 200 and gate.json()["evaluations"] == [], gate.text
        evaluations = pair.get(other, "wanda", "/api/v1/evaluations", rev=chat2)
        assert evaluations.status_code == 200 and evaluations.json() == [], evaluations.text
    with pair.repo.db.read() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(s.evaluations)).scalar() == 0


# --- 4: a tag may not take the name of a channel a contract guards ----------------------------


def test_a_tag_may_not_impersonate_production(pair):
    for door, name in ((0, "production"), (1, "chat@production")):
        body = {"tag": name, "rev": pair.ids["chat2"]}
        error = error_of(pair.post(door, "wanda", "/api/v1/tags", body), 409, "ReservedName")
        assert "may not be a tag" in error["message"]
        other = door + 1
        gone = pair.get(other, "wanda", "/api/v1/resolve", rev="chat@production")
        error_of(gone, 404, "RevisionNotFound")
        assert pair.get(other, "wanda", "/api/v1/tags", line="chat").json() == []


# --- 5: a canary start takes the gate ---------------------------------------------------------


def test_a_canary_of_an_unevaluated_set_takes_the_gate_or_an_admin_s_force(pair):
    start = {"ref": REF, "candidate": pair.ids["v2"], "fraction": 0.999999}
    error_of(pair.post(0, "max", "/api/v1/canary/start", start), 409, "GateRefused")
    assert pair.get(1, "max", "/api/v1/canary", ref=REF).json() is None
    forced = {**start, "force": True, "reason": "incident 42: hotfix"}
    error_of(pair.post(1, "max", "/api/v1/canary/start", forced), 403, "Forbidden")
    assert pair.get(0, "max", "/api/v1/canary", ref=REF).json() is None
    assert pair.post(1, "ada", "/api/v1/canary/start", forced).status_code == 200
    canary = pair.get(0, "max", "/api/v1/canary", ref=REF).json()
    assert (canary["candidate"], canary["started_by"]) == (pair.ids["v2"], "ada")
    assert canary["reason"] == "incident 42: hotfix"


# --- 7: a dataset is read by the tokens that may read its traces ------------------------------


def trace(commit: str) -> dict:
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
    }


def test_the_dataset_route_refuses_a_token_whose_lines_miss_its_traces(pair):
    writer = RemoteRepo(pair.doors[0].url, pair.tokens["wanda"], cache=pair.folder / "wanda")
    try:
        api.write_traces(writer, [trace(pair.ids["set"]) for _ in range(2)])
        made = api.traces_export(writer, pair.folder / "all.jsonl", by="wanda")
    finally:
        writer.close()
    assert made.records == 2
    path = f"/api/v1/datasets/{made.id}"
    for who in ("lim", "cody"):
        assert "macaron" in error_of(pair.get(1, who, path), 403, "Forbidden")["message"]
    answer = pair.get(1, "ada", path)
    assert answer.status_code == 200 and answer.json()["id"] == made.id, answer.text


# --- 11: a typo of a known channel makes nothing ----------------------------------------------


def test_a_typo_promote_asks_did_you_mean_and_makes_nothing(pair):
    chat2 = pair.ids["chat2"]
    before = snapshot(pair.repo)
    typo = pair.cli("wanda", "--repo", pair.doors[0].url, "promote", chat2, "--to", "prodution")
    assert "--create" in one_line_error(typo, "did you mean production?", code=1)
    r = pair.post(1, "wanda", "/api/v1/promote", {"rev": chat2, "channel": "prodution"})
    assert error_of(r, 422, "ChannelTypo")["detail"]["near"] == ["production"]
    for door in (0, 1):
        gone = pair.get(door, "wanda", "/api/v1/resolve", rev="chat@prodution")
        error_of(gone, 404, "RevisionNotFound")
    assert snapshot(pair.repo) == before


# --- 12: eight simultaneous approvals by one identity, over both replicas, create one ---------


def eight_approvals(pair: Pair, rev: str) -> list[httpx.Response]:
    """Eight approvals of REV for production by max at once, four through each replica."""
    body = {"rev": rev, "channel": "production"}
    clients = [pair.http(i, "max") for i in range(8)]  # even: one replica, odd: the other
    barrier, answers = threading.Barrier(8), [None] * 8

    def approve(i: int) -> None:
        barrier.wait()
        answers[i] = clients[i].post("/api/v1/approvals", json=body)

    threads = [threading.Thread(target=approve, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for c in clients:
        c.close()
    return answers


@pytest.mark.parametrize("line", ["coding", "router", "summary", "secret"])
def test_eight_simultaneous_approvals_over_two_replicas_create_one(pair, line):
    # Four lines, four races: a single burst of eight can miss the window by chance.
    answers = eight_approvals(pair, pair.ids[line])
    assert all(a is not None and a.status_code == 200 for a in answers), answers
    assert sorted(a.json()["created"] for a in answers) == [False] * 7 + [True]
    assert len({a.json()["at"] for a in answers}) == 1  # every answer shows the stored row
    with pair.repo.db.read() as conn:
        a = s.approvals.c
        rows = conn.execute(sa.select(s.approvals).where(a.commit_id == pair.ids[line]))
        assert [(r.by, r.channel) for r in rows] == [("max", "production")]
