"""Canaries: start, stop and status, audited in the channel's history, one open per channel."""

import pytest
import sqlalchemy as sa

from mint import api
from mint import schema as s
from mint.errors import CanaryOpen, InvalidConfig, NoCanary, RevisionNotFound
from mint.gates.live import wilson
from mint.registry.routes_events import event_of

from conftest import one_line_error, snapshot
from support.loop import add_traces


def test_start_status_stop_and_history(two_sets, repo):
    ids = two_sets
    assert api.canary_of(repo, "macaron@production") is None
    c = api.canary_start(repo, "macaron@production", ids["set2"], 0.2, by="bob", reason="try")
    assert (c.candidate, c.baseline, c.fraction, c.started_by) == (
        ids["set2"],
        ids["set"],
        0.2,
        "bob",
    )
    assert c.stopped_at is None and c.outcome is None
    assert api.canary_of(repo, "macaron@production") == c
    assert api.canary_of(repo, "macaron@staging") is None
    assert api.canary_of(repo, ids["set"]) is None  # a commit id names no channel

    # production: 4 scored of 5 (1, 1, 0, 1), plus traces that must not count
    add_traces(repo, ids["set"], "production", [1.0, 1.0, 0.0, 1.0, None])
    add_traces(repo, ids["set2"], "canary", [0.5, 0.5])
    add_traces(repo, ids["set2"], "staging", [0.0, 0.0, 0.0])  # not the canary's traffic
    add_traces(repo, ids["set"], "production", [0.0], line="other")
    st = api.canary_status(repo, "macaron@production")
    p, k = st.production, st.candidate
    assert (p.traces, p.scored, p.mean) == (5, 4, 0.75)
    assert (k.traces, k.scored, k.mean) == (2, 2, 0.5)
    assert p.low < 0.75 < p.high and 0 <= k.low < 0.5 < k.high <= 1
    assert (p.low, p.high) == pytest.approx(wilson(0.75, 4))

    stopped = api.canary_stop(repo, "macaron@production", by="carol", reason="worse")
    assert stopped.outcome == "stopped" and stopped.stopped_by == "carol"
    assert stopped.reason == "worse" and stopped.stopped_at is not None
    assert api.canary_of(repo, "macaron@production") is None
    assert api.canary_status(repo, "macaron@production").canary.id == c.id  # the latest

    moves = api.history(repo, "macaron@production")
    assert [m.action for m in moves] == ["promote", "canary-start", "canary-stop"]
    start, stop = moves[1:]
    assert (start.from_, start.to, start.by, start.reason) == (
        ids["set"],
        ids["set2"],
        "bob",
        "try",
    )
    assert (stop.by, stop.reason) == ("carol", "stopped: worse")
    # the channel did not move, and a rollback has nothing to go back to (canary rows ignored)
    assert api.status(repo)[[x.name for x in api.status(repo)].index("macaron")].channels == {
        "production": ids["set"]
    }
    with pytest.raises(Exception, match="nothing to roll back"):
        api.rollback(repo, "macaron@production", by="alice")
    # the registry's event stream names them
    with repo.db.read() as conn:
        rows = conn.execute(sa.select(s.ref_history).order_by(s.ref_history.c.id)).all()
    kinds = [event_of(r)["type"] for r in rows if r.kind == "canary"]
    assert kinds == ["canary.started", "canary.stopped"]
    assert event_of(rows[-1])["data"]["name"] == "production"


def test_one_open_canary_and_bad_input(two_sets, repo):
    ids = two_sets
    api.canary_start(repo, "macaron@production", ids["set2"], 0.1, by="bob")
    before = snapshot(repo)
    with pytest.raises(CanaryOpen):
        api.canary_start(repo, "macaron@production", ids["set2"], 0.1, by="bob")
    with pytest.raises(InvalidConfig):
        api.canary_start(repo, "macaron@production", ids["set2"], 1.0, by="bob")
    with pytest.raises(RevisionNotFound):  # an adapter commit, not a set of the line
        api.canary_start(repo, "macaron@staging", ids["chat2"], 0.1, by="bob")
    with pytest.raises(NoCanary):
        api.canary_stop(repo, "macaron@staging", by="bob")
    assert snapshot(repo) == before
    api.canary_stop(repo, "macaron@production", by="bob", outcome="promoted")
    again = api.canary_start(repo, "macaron@production", ids["set2"], 0.3, by="bob")
    assert again.fraction == 0.3


def test_canary_cli(two_sets, mint, repo):
    ids = two_sets
    r = mint("canary", "start", "macaron@production", ids["set2"], "--fraction", "0.2", "--json")
    assert r.code == 0, r
    assert r.json()["candidate"] == ids["set2"] and r.json()["fraction"] == 0.2
    add_traces(repo, ids["set2"], "canary", [1.0, 0.0])
    r = mint("canary", "status", "macaron@production", "--json")
    assert r.code == 0, r
    assert r.json()["candidate"]["mean"] == 0.5 and r.json()["production"]["scored"] == 0
    text = mint("canary", "status", "macaron@production")
    assert text.code == 0 and "canary" in text.out and "0.5" in text.out
    before = snapshot(repo)
    one_line_error(mint("canary", "start", "macaron@production", ids["set2"]), "open canary")
    one_line_error(
        mint("canary", "start", "macaron@staging", ids["set2"], "--fraction", "2"), "fraction"
    )
    one_line_error(
        mint("canary", "start", "macaron@production", ids["set2"], "--fraction", "nan"),
    )
    one_line_error(mint("canary", "start", "macaron", ids["set2"]), "LINE@CHANNEL")
    one_line_error(mint("canary", "stop", "macaron@staging"), "no open canary")
    one_line_error(mint("canary", "status", "macaron@staging"), "no canary")
    assert snapshot(repo) == before
    r = mint("canary", "stop", "macaron@production", "--reason", "enough")
    assert r.code == 0, r
    assert api.canary_of(repo, "macaron@production") is None
    hist = mint("history", "macaron@production")
    assert "canary-start" in hist.out and "canary-stop" in hist.out


def test_concurrent_starts_leave_one_open_canary(two_sets, repo):
    """Eight writers start a canary on one channel at once: one wins, seven are refused."""
    import threading

    ids = two_sets
    barrier, results = threading.Barrier(8), []

    def start(i: int) -> None:
        barrier.wait()
        try:
            api.canary_start(repo, "macaron@production", ids["set2"], 0.1, by=f"w{i}")
            results.append("started")
        except CanaryOpen:
            results.append("refused")

    threads = [threading.Thread(target=start, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["refused"] * 7 + ["started"]
    with repo.db.read() as conn:
        c = s.canaries.c
        n = conn.execute(sa.select(sa.func.count()).where(c.stopped_at.is_(None))).scalar()
    assert n == 1
    starts = [m for m in api.history(repo, "macaron@production") if m.action == "canary-start"]
    assert len(starts) == 1


def test_a_move_of_the_channel_ends_its_open_canary_in_the_same_transaction(two_sets, repo, mint):
    """A canary belongs to the holder it started beside: the promote of its candidate ends it
    as promoted, any other move (a rollback, another promote) as stopped, each in the move's
    own transaction and said so; a promote that moves nothing leaves it open."""
    ids = two_sets
    canary = api.canary_start(repo, "macaron@production", ids["set2"], 0.2, by="bob")
    assert api.promote(repo, ids["set"], "production", by="bob").stopped_canary is None
    assert api.canary_of(repo, "macaron@production") == canary  # nothing moved
    moved = api.promote(repo, ids["set2"], "production", by="carol")
    assert moved.stopped_canary == canary.id
    promote, stop = api.history(repo, "macaron@production")[-2:]
    assert (promote.action, stop.action, stop.by) == ("promote", "canary-stop", "carol")
    assert stop.reason == "promoted: the promote by carol brought it into production"
    assert api.canary_status(repo, "macaron@production").canary.outcome == "promoted"

    third = api.set_derive(repo, ids["set2"], {"coding": ids["chat"]}, author="al").id
    again = api.canary_start(repo, "macaron@production", third, 0.2, by="bob")
    r = mint("rollback", "macaron@production", "--reason", "incident")
    assert r.code == 0, r
    assert f"canary #{again.id} ended in the same transaction" in r.out
    status = api.canary_status(repo, "macaron@production")
    assert status.canary.outcome == "stopped" and status.verdict is None
    assert status.holder == ids["set"] != status.canary.baseline == ids["set2"]
    assert (
        "the canary's baseline" in status.canary.reason
        and "no longer holds" in status.canary.reason
    )
    shown = mint("canary", "status", "macaron@production")
    assert f"no longer holds macaron@production ({ids['set'][:12]} does)" in shown.out
