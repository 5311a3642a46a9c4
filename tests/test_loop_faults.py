"""The loop under faults and adversaries (issue 40), against a real `mint serve` and real
`mint improve` processes over a repository built as the loop demo builds its own: the
trained tiny MoL (`macaron`, its router line, four experts), a `quality` contract on staging
whose [live] table sets only the keys the demo's does (min_score, max_drop, min_traces: the
rest are the defaults, which must make the attacks fail), candidates scored by a
table-driven evaluator so that "better" is known exactly.

One repository and one server for the module. The database lives on a small tmpfs of its
own where this process may mount one (root, as on the test machines), so that a full disk is
a real one; elsewhere the full-disk test limits the server's file sizes instead
(RLIMIT_FSIZE), and says so. The server takes five tokens: four client applications that
honest users come through, and Mallory's.

- An operator's rollback during an open canary stops it in the same transaction, and the next
  round promotes nothing on the numbers of the set she removed.
- Forged promotion: honest users score the canary 0 and production 0.95; Mallory sends 32
  requests under invented user ids and scores selectively (the canary 1, production 0): the
  plain mean would promote; the loop stops the canary. The honest users' verdict still
  decides: a canary they prefer is promoted though Mallory scores it 0.
- Forced rollback: Mallory's requests as `user: mallory`, all scored 0 on the new holder:
  the plain mean falls under the floor; the loop keeps production.
- A `mint improve` killed at each named point of a round: the next run ends consistent
  (production on a set that passed its gate, no canary beside a set that does not hold
  production, staging not on a rejected set).
- 100 turns while another process holds the SQLite write lock past the writer's wait: all
  100 stored once it is released; feedback meanwhile answers "try again later" at once.
- A full disk: traces wait, and are written once space returns, up to the queue's bound.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from mint import api
from mint import schema as s
from mint.db import sqlite_url
from mint.ids import Action
from mint.runtime.split import SCALE, bucket

from support import wait_until
from support.disk import SmallDisk, empty_wal, limit_file_size, mountable
from support.loop import EVALUATOR, LIVE_CONTRACT, Crowd, add_traces, router_variant
from support.runtime import commit_demo
from support.runtime import demo as demo_files
from support.serving import Served, start_serve

pytestmark = pytest.mark.xdist_group("loop-faults")

PROD = "macaron@production"
STAGING = "macaron@staging"
APPS = ["APP_A", "APP_B", "APP_C", "APP_D"]  # the client applications honest users use
TOKENS = {name: f"{name.lower()}-{uuid.uuid4().hex}" for name in [*APPS, "MALLORY"]}
HONEST_USERS = [f"user-{i}" for i in range(60)]
ROOT = Path(__file__).resolve().parents[1]
# The named points of a round this module kills `mint improve` at (mint/faults.py); every
# `improve.*` point in the loop's code must be among them (checked below).
KILLS = (
    "improve.derived",
    "improve.canary-stopped",
    "improve.evaluated",
    "promote.in-transaction",
    "improve.staged",
    "rollback.in-transaction",
    "improve.rolled-back",
)
LOCK = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("ROLLBACK")
"""


@dataclass
class World:
    repo: object
    root: Path
    files: object
    served: Served
    sets: dict  # "init" (production's first holder), "s0" (the holder the tests start from)
    table: Path  # router commit -> the evaluator's score
    disk: SmallDisk | None
    db_path: Path
    routers: list = field(default_factory=list)

    def improve(self, *args: str, crash: str | None = None, user: str | None = None):
        """`mint improve macaron --contract quality --line router ARGS --json` in its own
        process (killed at CRASH, a named point, when given)."""
        argv = [sys.executable, "-m", "mint", "--repo", str(self.repo.root), "improve"]
        argv += ["macaron", "--contract", "quality", "--line", "router", "--canary", "0.5"]
        env = {**os.environ, "MINT_USER": user or "alice"}
        env.pop("MINT_CRASH_AT", None)
        if crash:
            env["MINT_CRASH_AT"] = crash
        return subprocess.run(
            [*argv, *args, "--json"], capture_output=True, text=True, env=env, timeout=300
        )

    def round(self, *args: str, **kwargs) -> dict:
        done = self.improve(*args, **kwargs)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)

    def new_router(self, score: float) -> str:
        """Commit another router (the trained one's weights) that the evaluator scores SCORE;
        it is the router line's head, so the next round's candidate."""
        n = len(self.routers)
        folder = router_variant(self.files.router, self.root / f"router-{n}", f"router {n}")
        cid = api.commit(self.repo, "router", folder, f"router {n}", author="al").id
        self.table.write_text(json.dumps(json.loads(self.table.read_text()) | {cid: score}))
        self.routers.append(cid)
        return cid

    def holder(self, ref: str = PROD) -> str:
        return api.resolve(self.repo, ref)

    def reset(self) -> None:
        """No canary open; production and staging moved (an operator's rollbacks) to init,
        then s0: a rollback from s0 goes back to init."""
        if api.canary_of(self.repo, PROD) is not None:
            api.canary_stop(self.repo, PROD, by="alice", reason="test reset")
        for ref in (PROD, STAGING):
            for name in ("init", "s0"):
                if self.holder(ref) != self.sets[name]:
                    api.rollback(self.repo, ref, to=self.sets[name], by="alice", reason="reset")

    def canary_served(self, candidate: str) -> None:
        wait_until(lambda: self.served.health()["canary"] == candidate, "canary not served")

    def crowd(self) -> Crowd:
        """The honest users, each with one of the four applications' tokens; with a canary
        open, a user on either side in turn, the applications spread over both sides, so
        that a few turns reach both variants through every application."""
        apps = [TOKENS[name] for name in APPS]
        canary = api.canary_of(self.repo, PROD)
        if canary is None:
            return Crowd(self.served.url, [(u, apps[i % 4]) for i, u in enumerate(HONEST_USERS)])
        cut = canary.fraction * SCALE
        on = [u for u in HONEST_USERS if bucket(u, canary.id) < cut]
        off = [u for u in HONEST_USERS if bucket(u, canary.id) >= cut]
        people = []
        for k, pair in enumerate(zip(on, off)):
            people += [(user, apps[k % 4]) for user in pair]
        return Crowd(self.served.url, people)

    def mallory(self, users: list[str]) -> Crowd:
        return Crowd(self.served.url, [(u, TOKENS["MALLORY"]) for u in users])

    def stored(self, ids: list[str]) -> int:
        """How many trace rows hold these ids."""
        with self.repo.db.read() as conn:
            q = sa.select(sa.func.count()).where(s.traces.c.id.in_(ids))
            return conn.execute(q).scalar()

    def consistent(self) -> None:
        """What any round leaves, however the last one ended: production on a set that passed
        its gate, no canary beside a set that does not hold production, staging not on a
        rejected set."""
        prod, staged = self.holder(), self.holder(STAGING)
        scores = [e.metrics.get("score", 0) for e in api.evaluations_of(self.repo, prod)]
        assert scores and max(scores) >= 0.5, (prod, scores)
        canary = api.canary_of(self.repo, PROD)
        assert canary is None or canary.baseline == prod, (canary, prod)
        candidate = canary.candidate if canary else None
        assert staged in (prod, candidate) or staged not in rejected(self.repo), staged


def rejected(repo) -> set[str]:
    """Sets production's history rejected: a canary stopped, or rolled back from."""
    out = set()
    for m in api.history(repo, PROD):
        if m.action == Action.CANARY_STOP and not str(m.reason).startswith("promoted"):
            out.add(m.to)
        if m.action == Action.ROLLBACK:
            out.add(m.from_)
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    files = demo_files(tmp_path_factory)
    root = tmp_path_factory.mktemp("loop-faults")
    disk = SmallDisk(root / "db", "48m") if mountable() else None
    (root / "db").mkdir(exist_ok=True)
    db_path = root / "db" / "mint.db"
    repo, _ = api.init(root / "repo", sqlite_url(db_path))
    routers = {"init": files.degraded_router, "s0": files.router}
    ids = commit_demo(repo, files, root / "set", routers, by="alice")
    script, table = root / "evaluate.py", root / "scores.json"
    script.write_text(EVALUATOR)
    table.write_text("{}")
    command = json.dumps([sys.executable, str(script), "{checkout}", str(table)])
    (root / "quality.toml").write_text(LIVE_CONTRACT.format(command=command))
    api.contract_add(repo, root / "quality.toml", by="alice")
    sets = {name: ids[name]["set"] for name in routers}
    for name in ("init", "s0"):
        api.evaluate(repo, sets[name], "quality", by="alice")
        api.promote(repo, sets[name], "staging", by="alice")
        api.promote(repo, sets[name], "production", by="alice")
    args = ["--poll", "0.2", *(a for name in TOKENS for a in ("--token-env", name))]
    served = start_serve(str(repo.root), files.base, root / "serve", *args, env=TOKENS)
    try:
        yield World(repo, root, files, served, sets, table, disk, db_path)
    finally:
        served.stop()
        repo.close()
        if disk is not None:
            disk.close()


def test_every_named_point_of_a_round_is_killed_here():
    code = "".join(p.read_text() for p in (ROOT / "mint" / "porcelain").glob("*.py"))
    points = set(re.findall(r'crash_point\("(improve\.[a-z-]+)"\)', code))
    assert points and points <= set(KILLS), points - set(KILLS)


# --- a canary belongs to the holder it started beside ---------------------------------------


def test_an_operators_rollback_during_a_canary_stops_it_and_nothing_is_promoted(world):
    w = world
    w.reset()
    w.new_router(0.8)
    started = w.round()
    assert started["outcome"] == "canary-started", started
    candidate = api.canary_of(w.repo, PROD).candidate
    w.canary_served(candidate)
    # users love the candidate: on these numbers the next round would promote it
    crowd = w.crowd()
    crowd.turns(50, lambda s: 1.0 if s == candidate else 0.1)
    assert api.canary_status(w.repo, PROD, contract="quality").verdict.action == "promote"

    rollback = subprocess.run(
        [sys.executable, "-m", "mint", "--repo", str(w.repo.root), "rollback", PROD],
        capture_output=True,
        text=True,
        env={**os.environ, "MINT_USER": "alice"},
    )
    assert rollback.returncode == 0, rollback.stderr
    assert "ended in the same transaction" in rollback.stdout, rollback.stdout
    assert w.holder() == w.sets["init"]
    moves = api.history(w.repo, PROD)
    back, stop = moves[-2:]
    assert (back.action, back.by, stop.action, stop.by) == (
        "rollback",
        "alice",
        "canary-stop",
        "alice",
    )
    assert "no longer holds" in stop.reason and stop.to == candidate
    status = subprocess.run(
        [sys.executable, "-m", "mint", "--repo", str(w.repo.root), "canary", "status", PROD],
        capture_output=True,
        text=True,
    )
    assert f"no longer holds {PROD}" in status.stdout, status.stdout

    after = w.round()
    assert after["outcome"] != "promoted", after
    assert candidate not in [m.to for m in api.history(w.repo, PROD) if m.action == "promote"]
    assert w.holder() == w.sets["init"]
    w.consistent()


# --- feedback that one caller cannot steer ---------------------------------------------------


def test_forged_promotion_and_forced_rollback_fail_and_honest_users_still_decide(world):
    w = world
    w.reset()
    # 1. forged promotion: honest users score the canary 0 and production 0.95; Mallory,
    # under invented user ids, scores whatever the canary served 1 and production 0
    w.new_router(0.8)
    assert w.round()["outcome"] == "canary-started"
    bad = api.canary_of(w.repo, PROD).candidate
    w.canary_served(bad)
    w.crowd().turns(24, lambda s: 0.0 if s == bad else 0.95)
    invented = [f"mallory-{uuid.uuid4().hex[:8]}" for _ in range(32)]
    w.mallory(invented).turns(32, lambda s: 1.0 if s == bad else 0.0)
    plain = _plain_means(w.repo, bad, w.sets["s0"])
    assert plain["canary"] >= plain["production"] - 0.05, plain  # a plain mean would promote
    judged = w.round()
    assert judged["outcome"] == "stopped", judged  # the honest users' verdict
    assert w.holder() == w.sets["s0"] and w.holder(STAGING) == w.sets["s0"]
    stopped = api.history(w.repo, PROD)[-1]
    assert stopped.action == "canary-stop" and "lies under -max_drop" in stopped.reason
    assert "5 callers" in stopped.reason  # four applications and Mallory, weighed apart

    # 2. the honest users' verdict still moves production: they prefer the next candidate,
    # Mallory scores it 0 (and production 1)
    w.new_router(0.8)
    assert w.round()["outcome"] == "canary-started"
    good = api.canary_of(w.repo, PROD).candidate
    w.canary_served(good)
    w.crowd().turns(24, lambda s: 1.0 if s == good else 0.1)
    w.mallory(invented).turns(32, lambda s: 0.0 if s == good else 1.0)
    promoted = w.round()
    assert promoted["outcome"] == "promoted", promoted
    assert w.holder() == good
    wait_until(lambda: w.served.health()["commit"] == good, "the server never swapped")

    # 3. forced rollback: 30 requests as `user: mallory`, all scored 0, beside 12 honest turns
    w.mallory(["mallory"]).turns(30, lambda s: 0.0)
    w.crowd().turns(12, lambda s: 0.95)
    since = api.history(w.repo, PROD)[-2].at  # the promote (the canary's stop follows it)
    scores = [t.score for t in api.traces_ls(w.repo, set_rev=good, since=since, limit=None)]
    scores = [x for x in scores if x is not None]
    assert len(scores) >= 20 and sum(scores) / len(scores) < 0.3  # a plain mean: rolled back
    kept = w.round()
    assert kept["outcome"] != "rolled-back", kept
    assert w.holder() == good
    w.consistent()


def _plain_means(repo, candidate: str, baseline: str) -> dict:
    """The plain mean of the latest scores of each variant since the open canary began."""
    since = api.canary_of(repo, PROD).started_at
    out = {}
    for variant, commit in (("canary", candidate), ("production", baseline)):
        found = api.traces_ls(repo, set_rev=commit, since=since, variant=variant, limit=None)
        scores = [t.score for t in found if t.score is not None]
        out[variant] = sum(scores) / len(scores)
    return out


# --- a kill at each named point of a round ------------------------------------------------


def test_a_kill_at_each_named_point_of_a_round_is_finished_by_the_next(world):
    """Live numbers are written into the tables as the server records them (25 scored
    traces a variant, one user each), so that each round's verdict is known; the server is
    not what this test is about."""
    w = world
    w.reset()
    killed: list[str] = []

    def kill_then_finish(point: str) -> dict:
        cut = w.improve(crash=point)
        assert cut.returncode == -signal.SIGKILL, (point, cut.returncode, cut.stderr[-2000:])
        killed.append(point)
        done = w.round()
        w.consistent()
        return done

    w.new_router(0.8)  # 1. killed after the derive: the next run evaluates, stages, starts
    assert kill_then_finish("improve.derived")["outcome"] == "canary-started"
    lost = api.canary_of(w.repo, PROD).candidate
    add_traces(w.repo, w.sets["s0"], "production", [0.95] * 25)
    add_traces(w.repo, lost, "canary", [0.05] * 25)
    # 2. killed after the canary's stop, before staging is taken back (the item 3)
    kill_then_finish("improve.canary-stopped")
    assert w.holder(STAGING) == w.sets["s0"] and api.canary_of(w.repo, PROD) is None

    w.new_router(0.8)  # 3. killed after the evaluation
    assert kill_then_finish("improve.evaluated")["outcome"] == "canary-started"
    won = api.canary_of(w.repo, PROD).candidate
    add_traces(w.repo, w.sets["s0"], "production", [0.1] * 25)
    add_traces(w.repo, won, "canary", [0.95] * 25)
    # 4. killed inside the promote's transaction: nothing of it stays; the next run promotes
    assert kill_then_finish("promote.in-transaction")["outcome"] == "promoted"
    assert w.holder() == won and api.canary_of(w.repo, PROD) is None

    w.new_router(0.8)  # 5. killed after staging it, before its canary
    assert kill_then_finish("improve.staged")["outcome"] == "canary-started"
    open_one = api.canary_of(w.repo, PROD).candidate
    # 6. production falls under its floor while that canary is open: killed inside the
    # rollback's transaction, the next run rolls back, and the canary stops with it
    add_traces(w.repo, won, "production", [0.0] * 25)
    assert kill_then_finish("rollback.in-transaction")["outcome"] == "rolled-back"
    assert w.holder() == w.sets["s0"] and api.canary_of(w.repo, PROD) is None
    assert open_one in rejected(w.repo) and w.holder(STAGING) == w.sets["s0"]

    # 7. again, killed after the rollback and before staging is taken back
    add_traces(w.repo, w.sets["s0"], "production", [0.0] * 25)
    kill_then_finish("improve.rolled-back")
    assert w.holder() == w.sets["init"] == w.holder(STAGING)
    assert killed == list(KILLS)


# --- traces a slow disk does not lose ---------------------------------------------------------


def test_turns_while_another_process_holds_the_write_lock_are_all_stored(world):
    """The lock is held past the server's lock wait (1 s), twice over: the writer gives up
    and tries again later; nothing acknowledged is lost, and feedback does not wait."""
    w = world
    wait_until(lambda: w.served.health()["traces"]["pending"] == 0, "traces left over")
    before = w.served.health()["traces"]
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK, str(w.db_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        sent = [trace for _, _, trace in w.crowd().turns(100, lambda s: None)]
        wait_until(lambda: w.served.health()["traces"]["retries"] >= before["retries"] + 2, "")
        busy = httpx.post(
            w.served.url + "/v1/feedback",
            json={"id": sent[-1], "score": 1},
            headers={"Authorization": f"Bearer {TOKENS['APP_A']}"},
            timeout=60,
        )
        assert holder.poll() is None  # answered while the lock is still held
        assert busy.status_code == 503 and busy.headers["retry-after"] == "1", busy.text
        assert busy.json()["error"]["code"] == "database_busy"
        traces = w.served.health()["traces"]
        assert traces["pending"] == 100 and traces["written"] == before["written"], traces
        assert traces["dropped"] == before["dropped"] and traces["failed"] == before["failed"]
    finally:
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(60)
    wait_until(lambda: w.served.health()["traces"]["pending"] == 0, "never written")
    assert w.stored(sent) == 100
    ok = httpx.post(
        w.served.url + "/v1/feedback",
        json={"id": sent[-1], "score": 1},
        headers={"Authorization": f"Bearer {TOKENS['APP_A']}"},
        timeout=60,
    )
    assert ok.status_code == 200, ok.text


def test_a_full_disk_keeps_traces_until_space_returns(world):
    """Where no tmpfs can be mounted here, the server's files may not grow (RLIMIT_FSIZE,
    set on its process): SQLite then fails its writes with an I/O error, not ENOSPC."""
    w = world
    wait_until(lambda: w.served.health()["traces"]["pending"] == 0, "traces left over")
    before = w.served.health()["traces"]
    empty_wal(w.db_path)  # so that the next write needs new space, not the WAL's old pages
    if w.disk is not None:
        w.disk.fill()
    else:
        limit_file_size(w.served.process.pid, 1)
    try:
        sent = [trace for _, _, trace in w.crowd().turns(30, lambda s: None)]
        wait_until(lambda: w.served.health()["traces"]["retries"] > before["retries"], "")
        traces = w.served.health()["traces"]
        assert traces["pending"] == 30 and traces["written"] == before["written"], traces
    finally:
        if w.disk is not None:
            w.disk.free()
        else:
            limit_file_size(w.served.process.pid, None)
    wait_until(lambda: w.served.health()["traces"]["pending"] == 0, "never written")
    assert w.stored(sent) == 30
    assert w.served.health()["traces"]["dropped"] == before["dropped"]
