"""What serves, recorded (issue 38), in a repository on SQLite and PostgreSQL: reports of
serving processes become the served history (switches, canaries, gaps where an instance was
unseen, restarts, goodbyes; stretches never overlap and never start before the repository
heard of the process), a contract's `[[served]]` rows, `fleet.diverged`/`fleet.converged`
events, `mint status`'s counts, `mint fleet` and `--wait`.

Reports are recorded with the repository's time given (`now=`), so that hours of serving take
no time here; the registry itself never takes a time from a client."""

from __future__ import annotations

import datetime as dt

import pytest

from mint import api
from mint.errors import (
    Forbidden,
    InvalidReport,
    RegistryError,
    RegistryUnreachable,
    TooManyInstances,
    UnknownServedCommit,
)
from mint.fleet.records import fleet_report
from mint.fleet.reporter import Reporter, retryable
from mint.fleet.signals import fleet_signals
from mint.refs.events import event_of
from mint.remote.repo import RemoteRepo

from conftest import one_line_error, snapshot
from support import free_port
from support.fleet import serving_cell

ME = "tester"
T0 = dt.datetime(2026, 12, 3, 14, 0, tzinfo=dt.UTC)


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def report(instance: str, commit: str | None, since: dt.datetime | None, **more) -> dict:
    """A report of INSTANCE serving COMMIT for chat@production since SINCE (every ten minutes,
    unless an interval is given: stale after half an hour)."""
    name = {"name": more.pop("name", "chat@production"), "commit": commit}
    name["since"] = since.isoformat() if since else None
    for key in ("canary", "failure"):
        if key in more:
            name[key] = more.pop(key)
    body = {"instance": instance, "engine": "embedded", "interval": more.pop("interval", 600.0)}
    body["started_at"] = more.pop("started_at", T0).isoformat()
    return body | {"names": [name]} | more


@pytest.fixture
def chat(repo, models):
    """chat with three commits, the first on production."""
    api.base_add(repo, "tiny-llama", models["base"])
    ids = [api.commit(repo, "chat", models[key], key, author=ME).id for key in ("a1", "a2", "a3")]
    api.promote(repo, ids[0], "production", by=ME)
    return ids


def history(repo, at_: dt.datetime | None = None) -> list:
    return api.fleet_history(repo, "chat@production", at=at_.isoformat() if at_ else None)


def stretches(repo, instance: str) -> list[tuple[str, str, str | None]]:
    return [(x.commit, x.start, x.until) for x in history(repo) if x.instance == instance]


def iso(moment: dt.datetime) -> str:
    return moment.isoformat()


def test_a_switch_ends_one_stretch_where_the_next_begins(repo, chat):
    c1, c2, _ = chat
    fleet_report(repo, report("i1", c1, at(0)), by=ME, now=at(0))
    fleet_report(repo, report("i1", c1, at(0)), by=ME, now=at(0.1))  # no change: no row
    fleet_report(repo, report("i1", c2, at(5)), by=ME, now=at(5.01))
    assert stretches(repo, "i1") == [(c1, iso(at(0)), iso(at(5))), (c2, iso(at(5)), None)]
    assert [x.commit for x in history(repo, at(4.9))] == [c1]
    assert [x.commit for x in history(repo, at(5))] == [c2]


def test_an_instance_unseen_for_three_intervals_leaves_a_gap(repo, chat):
    c1, c2, _ = chat
    every = {"interval": 30}  # stale after 90 s unseen
    fleet_report(repo, report("i1", c1, at(0), **every), by=ME, now=at(0))
    fleet_report(repo, report("i1", c1, at(0), **every), by=ME, now=at(1))
    [member] = api.fleet(repo, "chat@production")[0].members
    assert member.state == "stale"  # at the real now, long after
    # back after 9 minutes, same process, same commit: what it served meanwhile is not known
    fleet_report(repo, report("i1", c1, at(0), **every), by=ME, now=at(10))
    assert stretches(repo, "i1") == [(c1, iso(at(0)), iso(at(1))), (c1, iso(at(10)), None)]
    assert history(repo, at(5)) == []
    # a restart (another started_at) within the intervals is a gap too: from the old process's
    # last report until the repository first heard from the new one
    fleet_report(repo, report("i1", c1, at(10), **every), by=ME, now=at(10.1))
    restarted = report("i1", c2, at(10.15), started_at=at(10.12), **every)
    fleet_report(repo, restarted, by=ME, now=at(10.2))
    got = stretches(repo, "i1")[1:]
    assert got == [(c1, iso(at(10)), iso(at(10.1))), (c2, iso(at(10.2)), None)]


def test_a_report_cannot_back_date_what_it_served(repo, chat):
    """A new process's first stretch begins when the repository first heard of it, whatever
    it says; a later switch is kept between the stretch it ends and now."""
    c1, c2, _ = chat
    fleet_report(repo, report("i1", c1, at(-600), started_at=at(-600)), by=ME, now=at(0))
    assert stretches(repo, "i1") == [(c1, iso(at(0)), None)]
    fleet_report(repo, report("i1", c2, at(-5), started_at=at(-600)), by=ME, now=at(2))
    fleet_report(repo, report("i1", c1, at(99), started_at=at(-600)), by=ME, now=at(3))
    assert stretches(repo, "i1") == [
        (c1, iso(at(0)), iso(at(0))),
        (c2, iso(at(0)), iso(at(3))),
        (c1, iso(at(3)), None),
    ]


def test_a_canary_split_a_goodbye_and_a_name_no_longer_followed(repo, chat):
    c1, c2, _ = chat
    canary = {"commit": c2, "fraction": 0.25, "since": at(1).isoformat()}
    fleet_report(repo, report("i1", c1, at(0)), by=ME, now=at(0))
    fleet_report(repo, report("i1", c1, at(0), canary=canary), by=ME, now=at(1))
    [member] = api.fleet(repo, "chat@production")[0].members
    assert (member.canary, member.fraction) == (c2, 0.25)
    split = [(x.commit, x.canary, x.fraction) for x in history(repo, at(1))]
    assert split == [(c1, False, None), (c2, True, 0.25)]
    fleet_report(repo, report("i1", c1, at(0)), by=ME, now=at(3))  # the canary ended
    assert [x.commit for x in history(repo, at(3))] == [c1]
    goodbye = report("i1", c1, at(0), stopped=True) | {"names": []}
    fleet_report(repo, goodbye, by=ME, now=at(5))
    assert history(repo, at(6)) == []
    [view] = api.fleet(repo, "chat@production")  # the channel: no one follows it now
    assert view.members == [] and view.holder == c1


def test_every_commit_a_report_names_must_be_on_the_line_it_follows(repo, chat, models):
    c1, _, _ = chat
    other = api.commit(repo, "coding", models["a1"], "x", author=ME).id
    before = snapshot(repo)
    for bad in (
        report("i1", "ab" * 32, at(0)),
        report("i1", other, at(0)),
        report(
            "i1",
            c1,
            at(0),
            failure={"commit": other, "at": iso(at(0)), "kind": "E", "reason": "x"},
        ),
        report("i1", c1, None),
        report("i1", c1, at(0), interval=0),
        report("i1/../x y", c1, at(0)),
        report("i1", c1, at(0), name="chat@@x"),
        report("i1", c1, at(0)) | {"extra": 1},
        report("i1", c1, at(0)) | {"started_at": "yesterday"},
        report("i1", c1, at(0)) | {"started_at": "2026-12-03T14:00:00"},  # no zone
    ):
        with pytest.raises(InvalidReport):
            fleet_report(repo, bad, by=ME, now=at(0))
    with pytest.raises(UnknownServedCommit):
        fleet_report(repo, report("i1", other, at(0)), by=ME, now=at(0))
    assert snapshot(repo) == before


def test_one_identity_reports_for_a_bounded_number_of_live_instances(repo, chat):
    c1, _, _ = chat
    every = {"interval": 10}  # stale after 30 s unseen

    def send(name: str, minutes: float, by: str = ME) -> None:
        fleet_report(repo, report(name, c1, at(0), **every), by=by, max_live=3, now=at(minutes))

    for n in range(3):
        send(f"i{n}", 0)
    before = snapshot(repo)
    with pytest.raises(TooManyInstances):
        send("i3", 0.1)
    assert snapshot(repo) == before
    send("i0", 0.2)  # one it reports for already: taken
    send("i3", 0.2, by="other")  # another identity's
    send("i4", 1)  # the others are stale: a new one is taken again


def test_served_evidence_gates_a_promote(repo, chat, tmp_path, mint):
    _, c2, c3 = chat
    api.promote(repo, c2, "staging", by=ME)
    (tmp_path / "prod.toml").write_text(
        'name = "prod"\nchannel = "production"\n'
        '[[served]]\nchannel = "staging"\nmin_minutes = 60\nmin_instances = 2\n'
    )
    assert mint("contract", "add", tmp_path / "prod.toml").code == 0
    for commit in (c2, c3):  # a contract's gate needs an evaluation under it, as ever
        api.record_evaluation(repo, commit, "prod", {}, source="manual", by=ME)
    checks = lambda: api.gate(repo, c2, "production").checks  # noqa: E731
    row = lambda: next(c for c in checks() if c.check.startswith("served"))  # noqa: E731
    assert not row().ok and row().found == "0.0 min"
    start = dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)
    for name in ("s1", "s2"):
        soak = report(name, c2, start, name="chat@staging", started_at=start, interval=3600)
        fleet_report(repo, soak, by=ME, now=start)
    for name in ("s1", "s2"):  # both still serve it, an hour and a half later
        soak = report(name, c2, start, name="chat@staging", started_at=start, interval=3600)
        fleet_report(repo, soak, by=ME, now=start + dt.timedelta(minutes=90))
    check = row()
    assert check.check == "served chat@staging" and check.ok, check
    assert check.required == ">= 60 min on 2 instances at once" and check.found == "90.0 min"
    failed = [c.check for c in api.gate(repo, c3, "production").checks if not c.ok]
    assert failed == ["served chat@staging"]  # c3 never served staging
    one_line_error(mint("promote", c3, "--to", "production"), "gate", code=3)
    assert mint("promote", c2, "--to", "production").code == 0


def test_divergence_and_convergence_are_events_in_the_channel_history(repo, chat):
    c1, c2, _ = chat
    now = dt.datetime.now(dt.UTC)
    fleet_report(repo, report("i1", c1, now, started_at=now), by=ME, now=now)
    fleet_report(repo, report("i2", c1, now, started_at=now), by=ME, now=now)
    api.promote(repo, c2, "production", by=ME)
    assert fleet_signals(repo, after=3600) == []  # off the holder, but not for long
    failure = {"commit": c2, "at": now.isoformat(), "kind": "NotVerified", "reason": "unsigned"}
    fleet_report(repo, report("i2", c1, now, started_at=now, failure=failure), by=ME)
    fleet_report(repo, report("i1", c2, now, started_at=now), by=ME)
    [entry] = fleet_signals(repo, after=0)
    assert fleet_signals(repo, after=0) == []  # said once
    move = api.history(repo, "chat@production")[-1]
    assert (move.id, move.action, move.from_, move.to) == (entry, "fleet-diverged", c1, c2)
    assert "1 of 2 live instances off" in move.reason and "i2 serves" in move.reason
    assert "NotVerified: unsigned" in move.reason
    fleet_report(repo, report("i2", c2, dt.datetime.now(dt.UTC), started_at=now), by=ME)
    [entry] = fleet_signals(repo, after=0)
    moves = api.history(repo, "chat@production")
    assert [m.action for m in moves[-2:]] == ["fleet-diverged", "fleet-converged"]
    from mint.refs.events import rows_after

    events = [event_of(r) for r in rows_after(repo, 0)][-2:]
    assert [e["type"] for e in events] == ["fleet.diverged", "fleet.converged"]
    assert "i2 serves" in events[0]["data"]["reason"]
    # a rollback reads channel moves only: the fleet's rows are not holders
    assert api.rollback(repo, "chat@production", by=ME).to == c1


def test_status_counts_live_instances_serving_each_holder(repo, chat, mint):
    c1, c2, _ = chat
    now = dt.datetime.now(dt.UTC)
    for name, commit in (("i1", c1), ("i2", c1), ("i3", c2)):
        fleet_report(repo, report(name, commit, now, started_at=now), by=ME)
    [line] = [s for s in api.status(repo) if s.name == "chat"]
    assert line.serving == {"production": [2, 3]}
    assert serving_cell(mint("status").out, "production", c1) == "2/3"
    assert mint("status", "--json").json()[0]["serving"] == {"production": [2, 3]}


def test_fleet_and_wait_against_a_repository(repo, chat, mint):
    c1, c2, _ = chat
    r = mint("promote", c2, "--to", "production", "--wait", "--timeout", "1")
    assert r.code == 0 and "no live instance follows it" in r.out, r
    now = dt.datetime.now(dt.UTC)
    failure = {"commit": c1, "at": now.isoformat(), "kind": "BaseMismatch", "reason": "another"}
    fleet_report(repo, report("i1", c2, now, started_at=now, failure=failure), by=ME)
    r = mint("rollback", "chat@production", "--wait", "--timeout", "0.5")
    line = one_line_error(r, code=4)
    assert f"i1 serves {c2[:12]}" in line and "BaseMismatch: another" in line, line
    assert "mint fleet chat@production" in line
    shown = mint("fleet").out
    assert "i1" in shown and "FAILING: BaseMismatch: another" in shown, shown
    fleet_report(repo, report("i1", c1, dt.datetime.now(dt.UTC), started_at=now), by=ME)
    r = mint("promote", c1, "--to", "production", "--wait", "--json")
    assert r.code == 0 and r.json()["fleet"]["instances"] == ["i1"], r
    assert mint("fleet", "chat@production", "--json").json()[0]["serving"] == 1
    one_line_error(mint("fleet", "chat@nosuch"), "no instance follows it")
    one_line_error(mint("fleet", "history", "chat@production", "--at", "then"), "not a time")
    one_line_error(mint("promote", c1, "--to", "production", "--timeout", "3"), "--wait")


def test_a_report_that_cannot_go_is_dropped_and_counted():
    """A registry out of reach: each report is dropped and counted, none raises, and the
    next is tried a second later (a replica back, or another, hears the state at once)."""
    nowhere = RemoteRepo(f"http://127.0.0.1:{free_port()}", "mint_x")
    state = {"instance": "i1", "engine": "embedded", "interval": 10.0}
    state["started_at"] = T0.isoformat()
    reporter = Reporter(lambda r: api.fleet_report(nowhere, r, by=ME), lambda: dict(state))
    assert reporter.report_once() is False and reporter.report_once() is False
    assert reporter.stats() == {"sent": 0, "dropped": 2}
    # out of reach: tried again a second later; refused (a 4xx): only at the next interval
    assert retryable(RegistryUnreachable("down")) and retryable(RegistryError("x", 503))
    assert not retryable(Forbidden("t", "read line chat")) and not retryable(
        TooManyInstances("t", 3)
    )
    reporter.close(goodbye=True)
    assert reporter.stats()["dropped"] == 3


def test_the_history_of_a_line_that_does_not_exist_is_an_unknown_revision(repo, chat, mint):
    """A misspelt line is one line and exit 1, not an empty table; a line nobody served is
    an empty one."""
    one_line_error(mint("fleet", "history", "chta@production"), "unknown revision", code=1)
    assert mint("fleet", "history", "chat@staging", "--json").json() == []
