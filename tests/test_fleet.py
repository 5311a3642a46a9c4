"""What serves production, recorded (issue 38), against real processes: two `mint registry
serve` replicas over one PostgreSQL database behind a load balancer (as a Kubernetes Service
is), and three `mint serve macaron@production` instances following the channel through it,
each reporting what it serves. The commands a release owner types run as real `mint`
processes with an admin's token.

- `promote --wait` returns once all three serve the new holder;
- an instance started with `--require-signed` refuses an unsigned holder: `--wait` exits 4
  naming it and its reason, `mint fleet` shows it failing, the channel page (in Chromium)
  marks it, and a webhook hears `fleet.diverged`, then `fleet.converged`;
- `fleet history --at` names what answered before, during and after a rollback (one instance
  held still by SIGSTOP while the others switch); stretches never overlap;
- an instance killed with SIGKILL mid-switch is shown stale, left out of `--wait`, and when
  restarted converges, its history showing the gap;
- a registry replica killed: reports go on through the other;
- `mint status` counts live instances per holder; a stopped instance says goodbye; an adapter
  channel is followed and reported too.

Times are printed, never asserted (bench/bench_fleet.py measures them). The tests run in
order on one shared fleet: each begins where the one before left the channel.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mint import api
from mint.remote.repo import RemoteRepo

from conftest import Result, one_line_error
from support import wait_until
from support.browser import chromium, sign_in, wait_for
from support.fleet import Balancer, fleet_sets, serving_cell
from support.hooks import Receiver, signature_ok
from support.pgdb import pg_database
from support.registry import Registry, create_token, start_registry
from support.serving import Served, start_follower

pytestmark = pytest.mark.xdist_group("fleet")

REF = "macaron@production"
SECRET_ENV, SECRET = "MINT_WEBHOOK_FLEET", "fleet-secret"
DIVERGED_AFTER = 2.0  # seconds: the registries' --fleet-diverged-after
INTERVALS = {"r1": "1", "r2": "1", "r3": "5"}  # r3 is held still by SIGSTOP: stale later
TIMEOUT = 180.0  # liveness only


@dataclass
class Fleet:
    repo: object
    root: Path
    folder: Path
    base: Path
    sets: list[str]
    chat: list[str]
    replicas: list[Registry]
    balancer: Balancer
    tokens: dict[str, str]
    receiver: Receiver
    servers: dict[str, Served] = field(default_factory=dict)

    def serve(self, name: str, rev: str = REF, *extra: str) -> Served:
        args = ("--instance", name, "--report-interval", INTERVALS.get(name, "1"), *extra)
        if name == "r2":
            args += ("--require-signed",)
        served = start_follower(
            self.balancer.url,
            self.tokens["serving"],
            rev,
            self.base,
            self.folder / name,
            args=args,
        )
        self.servers[name] = served
        return served

    def mint(self, *args: str, replica: int = 0) -> Result:
        """`mint --repo REPLICA ARGS` as a separate process, with the admin's token."""
        env = {**os.environ, "MINT_TOKEN": self.tokens["ops"]}
        argv = [sys.executable, "-m", "mint", "--repo", self.replicas[replica].url, *args]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=TIMEOUT)
        return Result(done.returncode, done.stdout, done.stderr)

    def members(self, ref: str = REF, replica: int = 0) -> dict:
        remote = RemoteRepo(self.replicas[replica].url, self.tokens["ops"])
        try:
            return {m.instance: m for m in api.fleet(remote, ref)[0].members}
        finally:
            remote.close()

    def serving(self, commit: str, *names: str, ref: str = REF) -> bool:
        found = self.members(ref)
        return all(found.get(n) and found[n].live and found[n].commit == commit for n in names)


@pytest.fixture(scope="module")
def fleet(models, tmp_path_factory):
    folder = tmp_path_factory.mktemp("fleet")
    with pg_database() as url:
        repo, _ = api.init(folder / "repo", url)
        made = fleet_sets(repo, models, folder)
        lines = ("macaron", "router", "chat", "coding", "summary")
        tokens = {
            "serving": create_token(repo.root, "serving", "reader", lines),
            "ops": create_token(repo.root, "ops", "admin"),
        }
        receiver = Receiver()
        api.webhook_add(
            repo,
            receiver.url("/hook"),
            SECRET_ENV,
            ["fleet.diverged", "fleet.converged"],
            by="ann",
        )
        args = ("--fleet-diverged-after", str(DIVERGED_AFTER))
        replicas = [
            start_registry(repo.root, env={SECRET_ENV: SECRET}, args=args) for _ in range(2)
        ]
        balancer = Balancer([("127.0.0.1", int(r.url.rsplit(":", 1)[1])) for r in replicas])
        world = Fleet(
            repo, repo.root, folder, models["base"], made["sets"], made["chat"], replicas,
            balancer, tokens, receiver,
        )  # fmt: skip
        try:
            with ThreadPoolExecutor(3) as pool:  # three processes loading torch at once
                list(pool.map(world.serve, ("r1", "r2", "r3")))
            wait_until(lambda: world.serving(world.sets[0], "r1", "r2", "r3"), "all report")
            yield world
        finally:
            for served in world.servers.values():
                served.stop(signal.SIGKILL)
            balancer.close()
            for registry in replicas:
                registry.stop()
            receiver.close()
            repo.close()


def test_promote_wait_returns_once_every_instance_serves_the_new_holder(fleet):
    s0, s1, _ = fleet.sets
    r = fleet.mint("promote", s1, "--to", "production", "--wait", "--timeout", "120", "--json")
    returned = dt.datetime.now(dt.UTC)
    assert r.code == 0, r
    done = r.json()["fleet"]
    assert sorted(done["instances"]) == ["r1", "r2", "r3"] and done["target"] == s1
    found = fleet.members()
    assert {n: (m.commit, m.state, m.holder) for n, m in found.items()} == {
        n: (s1, "live", True) for n in ("r1", "r2", "r3")
    }
    last = max(dt.datetime.fromisoformat(m.since) for m in found.values())
    assert last <= returned
    after = (returned - last).total_seconds()
    print(f"\n--wait took {done['seconds']:.2f} s, returning {after:.2f} s after the last switch")


def test_an_instance_refusing_an_unsigned_holder_is_named_everywhere(fleet, tmp_path):
    _, s1, s2 = fleet.sets
    r = fleet.mint("promote", s2, "--to", "production", "--wait", "--timeout", "8")
    line = one_line_error(r, code=4)
    assert "1 live instance of macaron@production did not serve" in line, line
    assert f"r2 serves {s1[:12]}" in line and "NotVerified" in line, line
    assert "it carries no signature" in line, line
    found = fleet.members()
    assert (found["r1"].commit, found["r3"].commit, found["r2"].commit) == (s2, s2, s1)
    failure = found["r2"].failure
    assert (failure.commit, failure.kind) == (s2, "NotVerified")
    shown = fleet.mint("fleet", REF).out
    assert any(l.startswith("r2 ") and "FAILING: NotVerified" in l for l in shown.splitlines())
    diverged = wait_until_event(fleet, "fleet.diverged")
    assert diverged.event["data"]["channel"] == "production"
    assert "r2 serves" in diverged.event["data"]["reason"]
    assert signature_ok(diverged, SECRET)
    page_marks_the_refusal(fleet, tmp_path)
    r = fleet.mint("rollback", REF, "--wait", "--timeout", "120")
    assert r.code == 0, r
    assert f"3/3 live instances serve {s1[:12]}" in r.out, r
    converged = wait_until_event(fleet, "fleet.converged")
    assert converged.event["data"]["to"] == s1 and signature_ok(converged, SECRET)


def wait_until_event(fleet: Fleet, kind: str):
    def found():
        return next((r for r in fleet.receiver.at("/hook") if r.event["type"] == kind), None)

    wait_until(found, f"no {kind} event", timeout=60)
    return found()


def page_marks_the_refusal(fleet: Fleet, tmp_path: Path) -> None:
    """The channel page, in Chromium, marks r2 failing and diverged, with its reason."""
    browser = chromium(tmp_path / "profile")
    try:
        url = fleet.replicas[1].url
        sign_in(browser, url, fleet.tokens["ops"])
        browser.get(f"{url}/channel/{REF}")
        row = wait_for(
            browser, lambda: browser.find_element("css selector", "tr[data-instance=r2]")
        )
        classes = row.get_attribute("class").split()
        assert {"failing", "diverged"} <= set(classes), classes
        assert "NotVerified" in row.find_element("css selector", ".why").text
        ok = browser.find_element("css selector", "tr[data-instance=r1]")
        assert "holder" in ok.get_attribute("class").split()
        assert browser.find_elements("css selector", "#served li.stretch")
    finally:
        browser.quit()


def at(fleet: Fleet, moment: dt.datetime) -> dict[str, str]:
    r = fleet.mint("fleet", "history", REF, "--at", moment.isoformat(), "--json")
    assert r.code == 0, r
    return {x["instance"]: x["commit"] for x in r.json() if not x["canary"]}


def test_history_at_names_what_answered_before_during_and_after_a_rollback(fleet):
    s0, s1, _ = fleet.sets
    r3 = fleet.servers["r3"]
    before = dt.datetime.now(dt.UTC)
    os.kill(r3.process.pid, signal.SIGSTOP)  # it cannot switch until it is let go
    try:
        assert fleet.mint("rollback", REF, "--to", s0).code == 0
        wait_until(lambda: fleet.serving(s0, "r1", "r2"), "r1 and r2 switch", timeout=TIMEOUT)
        during = dt.datetime.now(dt.UTC)
    finally:
        os.kill(r3.process.pid, signal.SIGCONT)
    wait_until(lambda: fleet.serving(s0, "r3"), "r3 switches once let go", timeout=TIMEOUT)
    after = dt.datetime.now(dt.UTC)
    assert at(fleet, before) == {"r1": s1, "r2": s1, "r3": s1}
    assert at(fleet, during) == {"r1": s0, "r2": s0, "r3": s1}
    assert at(fleet, after) == {"r1": s0, "r2": s0, "r3": s0}
    stretches = fleet.mint("fleet", "history", REF, "--json").json()
    assert_no_overlap(stretches)


def assert_no_overlap(stretches: list[dict]) -> None:
    by_key: dict = {}
    for x in stretches:
        by_key.setdefault((x["instance"], x["name"], x["canary"]), []).append(x)
    for key, rows in by_key.items():
        rows.sort(key=lambda x: x["start"])
        for a, b in zip(rows, rows[1:]):
            assert a["until"] is not None and a["until"] <= b["start"], (key, a, b)


def test_a_killed_instance_is_stale_left_out_of_wait_and_shows_a_gap(fleet):
    s0, s1, _ = fleet.sets
    r1 = fleet.servers["r1"]
    os.kill(r1.process.pid, signal.SIGSTOP)
    env = {**os.environ, "MINT_TOKEN": fleet.tokens["ops"]}
    argv = [sys.executable, "-m", "mint", "--repo", fleet.replicas[0].url, "promote", s1]
    waiting = subprocess.Popen(
        [*argv, "--to", "production", "--wait", "--timeout", "120", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    wait_until(lambda: api.resolve(fleet.repo, REF) == s1, "the promote is made")
    os.kill(r1.process.pid, signal.SIGKILL)  # mid-switch: the channel moved, r1 never switched
    killed = dt.datetime.now(dt.UTC)
    out, err = waiting.communicate(timeout=TIMEOUT)
    assert waiting.returncode == 0, err
    done = json.loads(out)["fleet"]
    assert sorted(done["instances"]) == ["r2", "r3"] and done["excluded"] == ["r1 (stale)"]
    assert fleet.members()["r1"].state == "stale"
    assert "STALE" in next(l for l in fleet.mint("fleet").out.splitlines() if l.startswith("r1 "))
    fleet.serve("r1")  # the same instance name, restarted
    wait_until(lambda: fleet.serving(s1, "r1", "r2", "r3"), "r1 converges", timeout=TIMEOUT)
    rows = [
        x for x in fleet.mint("fleet", "history", REF, "--json").json() if x["instance"] == "r1"
    ]
    gaps = [(a, b) for a, b in zip(rows, rows[1:]) if a["until"] < b["start"]]
    assert any(a["until"] <= killed.isoformat() <= b["start"] for a, b in gaps), rows
    shown = fleet.mint("fleet", "history", REF).out
    assert any(l.startswith("r1 ") and "(unseen)" in l for l in shown.splitlines()), shown


def test_reports_go_on_through_the_other_replica(fleet):
    s0, _, _ = fleet.sets
    dying = fleet.replicas[1]
    os.kill(dying.pid, signal.SIGKILL)
    dying._process.wait()
    killed = dt.datetime.now(dt.UTC)
    r = fleet.mint("promote", s0, "--to", "production", "--wait", "--timeout", "120")
    assert r.code == 0, r
    assert "3/3 live instances serve" in r.out, r
    time.sleep(2.5)  # a few more reports, all through the replica left
    found = fleet.members()
    assert all(m.live and dt.datetime.fromisoformat(m.seen_at) > killed for m in found.values())
    stretches = fleet.mint("fleet", "history", REF, "--json").json()
    for name in ("r1", "r2", "r3"):  # no gap since the kill: no report went missing for long
        rows = [
            x
            for x in stretches
            if x["instance"] == name and (x["until"] or "9") > killed.isoformat()
        ]
        assert all(a["until"] == b["start"] for a, b in zip(rows, rows[1:])), rows


def test_canary_start_wait_returns_once_every_instance_serves_the_split(fleet):
    s0, s1, _ = fleet.sets
    r = fleet.mint("canary", "start", REF, s1, "--fraction", "0.25", "--wait", "--json")
    assert r.code == 0, r
    done = r.json()["fleet"]
    assert done["canary"] is True and sorted(done["instances"]) == ["r1", "r2", "r3"]
    found = fleet.members()
    assert {(m.commit, m.canary, m.fraction) for m in found.values()} == {(s0, s1, 0.25)}
    assert fleet.mint("canary", "stop", REF).code == 0
    wait_until(lambda: all(m.canary is None for m in fleet.members().values()), "split ends")
    split = [x for x in fleet.mint("fleet", "history", REF, "--json").json() if x["canary"]]
    assert {x["instance"] for x in split} == {"r1", "r2", "r3"}
    assert all(x["commit"] == s1 and x["fraction"] == 0.25 and x["until"] for x in split)


def test_status_counts_a_goodbye_and_an_adapter_channel(fleet):
    s0 = fleet.sets[0]
    status = fleet.mint("status").out
    assert serving_cell(status, "production", s0) == "3/3", status
    assert fleet.servers.pop("r3").stop() == 0  # SIGTERM: it says goodbye
    wait_until(lambda: fleet.members()["r3"].state == "stopped", "r3 stopped")
    assert serving_cell(fleet.mint("status").out, "production", s0) == "2/2"
    c1, c2 = fleet.chat
    fleet.serve("a1", "chat@production")
    wait_until(lambda: fleet.serving(c1, "a1", ref="chat@production"), "a1 reports")
    r = fleet.mint("promote", c2, "--to", "production", "--wait", "--json")
    assert r.code == 0 and r.json()["fleet"]["instances"] == ["a1"], r
    [member] = fleet.members("chat@production").values()
    assert (member.instance, member.engine, member.commit) == ("a1", "embedded", c2)
