"""The loop: `improve` promotes a better candidate through a canary, refuses a worse one at
the gate or on live scores, and rolls production back under its live floor; every step is
in the channel's history as the loop's, with its numbers.

Candidates are evaluated by a real evaluator process on each set's checkout: it reads the
checkout's mol.toml and scores the router commit from a table the test writes (a stand-in
for a benchmark, so that "better" and "worse" are known exactly). The fixture `loop` is in
conftest.py, built by `support.loop.quality_loop`."""

import os
import sys

import pytest

from mint import api
from mint.gates.contracts import parse_contract
from mint.ids import object_id

from conftest import one_line_error, snapshot
from support.loop import add_traces


def _holder(repo, channel):
    return next(s for s in api.status(repo) if s.name == "macaron").channels[channel]


def test_improve_promotes_a_better_candidate_then_rolls_back_on_a_live_drop(loop, repo, models):
    ids, score_router = loop
    router2 = api.commit(repo, "router", models["a2"], "router v2", author="al").id
    score_router(router2, 0.8)

    r = api.improve(repo, "macaron", contract="quality")
    assert r.outcome == "canary-started", r
    assert [s.action for s in r.steps] == ["derive", "evaluate", "promote", "canary-start"]
    cand = r.steps[0].commit
    assert api.show(repo, cand).config["router"]["adapter"] == router2
    assert api.evaluations_of(repo, cand)[-1].metrics == {"score": 0.8}
    assert _holder(repo, "staging") == cand and _holder(repo, "production") == ids["set"]
    canary = api.canary_of(repo, "macaron@production")
    assert (canary.candidate, canary.fraction, canary.started_by) == (cand, 0.1, "mint-loop")

    # not enough live feedback yet: the round waits and writes nothing
    add_traces(repo, cand, "canary", [0.9, 0.9])
    before = snapshot(repo)
    assert api.improve(repo, "macaron", contract="quality").outcome == "waiting"
    assert snapshot(repo) == before

    add_traces(repo, ids["set"], "production", [0.2] * 6)
    add_traces(repo, cand, "canary", [0.9] * 4)  # 6 scored from 6 users: 0.9 against 0.2
    r = api.improve(repo, "macaron", contract="quality")
    assert r.outcome == "promoted", r
    assert [s.action for s in r.steps] == ["promote", "canary-stop"]
    assert _holder(repo, "production") == cand
    assert api.canary_of(repo, "macaron@production") is None
    assert api.canary_status(repo, "macaron@production").canary.outcome == "promoted"
    assert api.improve(repo, "macaron", contract="quality").outcome == "idle"

    # live scores of the new holder fall under the floor (their upper bound too): back to v1
    add_traces(repo, cand, "production", [0.0] * 5)
    r = api.improve(repo, "macaron", contract="quality")
    assert r.outcome == "rolled-back", r
    assert _holder(repo, "production") == ids["set"] and _holder(repo, "staging") == ids["set"]
    # the rolled-back set is not tried again
    assert api.improve(repo, "macaron", contract="quality").outcome == "idle"

    moves = api.history(repo, "macaron@production")
    assert [(m.action, m.by) for m in moves] == [
        ("promote", "alice"),
        ("canary-start", "mint-loop"),
        ("promote", "mint-loop"),
        ("canary-stop", "mint-loop"),
        ("rollback", "mint-loop"),
    ]
    start, promoted, stop, back = moves[1:]
    assert "score=0.8" in start.reason
    assert "canary mean 0.900 against production 0.200: difference +0.700" in promoted.reason
    assert "clears -max_drop 0.05" in promoted.reason
    assert "over 6 scored of 6 traces, 6 users, 1 callers" in promoted.reason
    assert promoted.contract is not None and promoted.evaluations  # the gate's evidence
    assert stop.reason.startswith("promoted")
    assert "mean 0.000" in back.reason and "upper bound 0.434 < min_score 0.5" in back.reason
    staged = api.history(repo, "macaron@staging")
    assert staged[-2].by == "mint-loop" and "best of 1 candidates" in staged[-2].reason
    assert staged[-2].evaluations == [r_ev.id for r_ev in api.evaluations_of(repo, cand)]
    assert staged[-1].action == "rollback" and staged[-1].by == "mint-loop"


def test_improve_refuses_a_worse_candidate_at_the_gate(loop, repo, models):
    ids, score_router = loop
    worse = api.commit(repo, "router", models["a3"], "router v3", author="al").id
    score_router(worse, 0.3)
    r = api.improve(repo, "macaron", contract="quality")
    assert r.outcome == "refused", r
    assert [s.action for s in r.steps] == ["derive", "evaluate", "refuse"]
    assert "score 0.3 (needs >= 0.5)" in r.steps[-1].detail
    assert api.canary_of(repo, "macaron@production") is None
    assert _holder(repo, "production") == ids["set"] and _holder(repo, "staging") == ids["set"]
    # the next round finds the same set and evaluation: nothing new is recorded
    before = snapshot(repo)
    again = api.improve(repo, "macaron", contract="quality")
    assert again.outcome == "refused" and [s.action for s in again.steps] == ["refuse"]
    assert snapshot(repo) == before


def test_improve_stops_a_canary_that_scores_worse_live(loop, repo, models):
    ids, score_router = loop
    router2 = api.commit(repo, "router", models["a2"], "router v2", author="al").id
    score_router(router2, 0.7)
    cand = api.improve(repo, "macaron", contract="quality", min_traces=3).steps[0].commit
    add_traces(repo, ids["set"], "production", [0.9] * 5)
    add_traces(repo, cand, "canary", [0.1] * 5)
    r = api.improve(repo, "macaron", contract="quality", min_traces=3)
    assert r.outcome == "stopped", r
    assert [s.action for s in r.steps] == ["canary-stop", "rollback"]
    assert _holder(repo, "production") == ids["set"] and _holder(repo, "staging") == ids["set"]
    last = api.history(repo, "macaron@production")[-1]
    assert last.action == "canary-stop" and last.by == "mint-loop"
    assert "difference -0.800" in last.reason and "lies under -max_drop 0.05" in last.reason
    assert api.improve(repo, "macaron", contract="quality", min_traces=3).outcome == "idle"


def test_improve_cli(loop, mint, repo, models):
    ids, score_router = loop
    router2 = api.commit(repo, "router", models["a2"], "router v2", author="al").id
    score_router(router2, 0.8)
    r = mint("improve", "macaron", "--contract", "quality", "--canary", "0.2", "--json")
    assert r.code == 0, r
    assert r.json()["outcome"] == "canary-started"
    assert api.canary_of(repo, "macaron@production").fraction == 0.2
    text = mint("improve", "macaron", "--contract", "quality", "--min-traces", "3")
    assert text.code == 0 and "waiting" in text.out
    hist = mint("history", "macaron@production")
    assert "canary-start" in hist.out and "mint-loop" in hist.out
    before = snapshot(repo)
    one_line_error(mint("improve", "macaron", "--contract", "nope"), "unknown contract")
    one_line_error(mint("improve", "macaron", "--contract", "quality", "--canary", "1.5"))
    one_line_error(mint("improve", "nowhere", "--contract", "quality"), "holder")
    assert snapshot(repo) == before


@pytest.mark.parametrize(
    "live, expect",
    [
        ("min_score = 1.5", "live.min_score"),
        ("max_drop = -0.1", "live.max_drop"),
        ('min_score = "high"', "live.min_score"),
        ("min_traces = 0", "live.min_traces"),
        ("min_traces = 2.5", "live.min_traces"),
        ("floor = 0.5", "unknown live key 'floor'"),
        ("max_user_share = 0", "live.max_user_share"),
        ("max_caller_share = 1.5", "live.max_caller_share"),
        ("confidence = 1", "live.confidence"),
        ("confidence = 0.4", "live.confidence"),
        ("min_users = 0", "live.min_users"),
        ("min_callers = true", "live.min_callers"),
        ("min_traces = 10\nmax_traces = 5", "live.max_traces"),
    ],
)
def test_malformed_live_tables(mint, repo, tmp_path, live, expect):
    path = tmp_path / "c.toml"
    path.write_text(f'name = "q"\nchannel = "staging"\n[live]\n{live}\n')
    before = snapshot(repo)
    one_line_error(mint("contract", "add", path), expect)
    path.write_text('name = "q"\nchannel = "staging"\nlive = 3\n')
    one_line_error(mint("contract", "add", path), "[live] must be a table")
    assert snapshot(repo) == before


def test_live_table_is_kept_and_absent_means_unchanged(mint, repo, tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('name = "q"\nchannel = "staging"\n')
    plain = api.contract_add(repo, path, by="a").contract
    assert plain.live is None and mint("contract", "show", "q", "--json").json()["live"] is None
    # without [live] the body, and so every existing contract's id, is what it was before
    body = parse_contract(path.read_text())
    assert "live" not in body and plain.id == object_id({"version": 1, "body": body})
    path.write_text('name = "q"\nchannel = "staging"\n[live]\nmin_score = 0.4\nmin_traces = 7\n')
    added = api.contract_add(repo, path, by="a")
    assert added.created and added.contract.version == 2
    assert added.contract.live == {"min_score": 0.4, "min_traces": 7}
    every = {"max_traces": 70, "min_users": 3, "min_callers": 2, "max_user_share": 0.5}
    every |= {"max_caller_share": 0.5, "confidence": 0.9}
    path.write_text(
        'name = "q"\nchannel = "staging"\n[live]\n'
        + "".join(f"{k} = {v}\n" for k, v in every.items())
    )
    assert api.contract_add(repo, path, by="a").contract.live == every


def test_improve_with_route_accuracy_from_the_runtime(mint, repo, tmp_path, tmp_path_factory):
    """`--eval-data`: the CLI hands the loop the runtime's route-eval as its evaluator; the
    trained router beats the degraded one that production serves."""
    from mint.examples.demo import MOL as DEMO_MOL

    from support.runtime import demo

    files = demo(tmp_path_factory)
    api.base_add(repo, "tiny-llama", files.base)
    for label, folder in files.experts.items():
        api.commit(repo, label, folder, label, author="a")
        api.tag(repo, "v1", label, by="a")
    degraded = api.commit(repo, "router", files.degraded_router, "degraded", author="a").id
    folder = tmp_path / "set"
    folder.mkdir()
    for src in (files.route_prompt, files.summary_prompt):
        (folder / src.name).write_bytes(src.read_bytes())
    (folder / "mol.toml").write_text(DEMO_MOL.format(router=degraded))
    first = api.set_commit(repo, folder / "mol.toml", "degraded", author="a").id
    api.promote(repo, first, "production", by="a")
    good = api.commit(repo, "router", files.router, "trained", author="a").id
    (tmp_path / "routing.toml").write_text(
        'name = "routing"\nchannel = "staging"\n[[metric]]\nname = "route_accuracy"\nmin = 0.9\n'
    )
    api.contract_add(repo, tmp_path / "routing.toml", by="a")
    r = mint(
        "improve",
        "macaron",
        "--contract",
        "routing",
        "--eval-data",
        files.heldout_data,
        "--base-dir",
        files.base,
        "--line",
        "router",
        "--json",
    )
    assert r.code == 0, r
    assert r.json()["outcome"] == "canary-started"
    cand = api.canary_of(repo, "macaron@production").candidate
    assert api.show(repo, cand).config["router"]["adapter"] == good
    ev = api.evaluations_of(repo, cand)[-1]
    assert (
        ev.source == "route-eval" and ev.metrics["route_accuracy"] >= 0.9 and ev.by == "mint-loop"
    )


def test_improve_watch_runs_rounds_as_commits_arrive(loop, repo, models):
    """`--watch` in its own process: idle at first, it stages and canaries a router committed
    while it runs, and Ctrl-C (SIGINT) ends it cleanly."""
    import signal
    import subprocess
    import threading
    import time

    ids, score_router = loop
    argv = [sys.executable, "-m", "mint", "--repo", str(repo.root), "improve", "macaron"]
    argv += ["--contract", "quality", "--watch", "--interval", "0.2"]
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # SIGABRT dumps every thread's stack
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Ctrl-C's default, as in a terminal: a test run started in the background (`cmd &` in a
    # script) ignores SIGINT, and a child would inherit that and never see it.
    default_int = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    proc = subprocess.Popen(argv, env=env, preexec_fn=default_int, **pipes)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")))
    reader.start()

    def wait_until(condition) -> None:
        deadline = time.monotonic() + 90
        while not condition() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert condition(), (lines, proc.poll())

    try:
        wait_until(lambda: any(": idle" in line for line in lines))
        router2 = api.commit(repo, "router", models["a2"], "v2", author="al").id
        score_router(router2, 0.8)
        wait_until(lambda: api.canary_of(repo, "macaron@production") is not None)
        wait_until(lambda: any(": canary-started" in line for line in lines))
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # say where it hangs (seen when SIGINT was ignored)
            proc.send_signal(signal.SIGABRT)
            _, err = proc.communicate(timeout=30)
            pytest.fail(f"improve --watch did not end on SIGINT; its threads:\n{err[-6000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
        reader.join(timeout=10)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert api.canary_of(repo, "macaron@production").candidate != ids["set"]


def test_a_canary_whose_baseline_no_longer_holds_is_stopped_never_judged(loop, repo, models):
    """Production moved under an open canary without stopping it (a move written by a mint
    that did not stop canaries, a database restored): its numbers compare the candidate with
    a set that no longer serves, so the round stops it, however good they look."""
    from mint.ids import Action, RefKind
    from mint.refs import RefsContainer

    ids, score_router = loop
    score_router(api.commit(repo, "router", models["a2"], "router v2", author="al").id, 0.8)
    cand = api.improve(repo, "macaron", contract="quality").steps[0].commit
    add_traces(repo, ids["set"], "production", [0.1] * 6)
    add_traces(repo, cand, "canary", [1.0] * 6)
    chat = api.commit(repo, "chat", models["a1"], "chat v2", author="al").id
    other = api.set_derive(repo, ids["set"], {"chat": chat}, author="al").id
    with repo.db.write() as conn:
        refs = RefsContainer(conn)
        current = refs.get("macaron", "production")
        refs.set_if_equals(
            "macaron",
            "production",
            current,
            other,
            kind=RefKind.CHANNEL,
            by="restore",
            action=Action.PROMOTE,
        )
    status = api.canary_status(repo, "macaron@production", contract="quality")
    assert status.holder == other and status.verdict.action == "stop"
    assert "no longer holds production" in status.verdict.reason
    r = api.improve(repo, "macaron", contract="quality")
    assert r.outcome == "stopped", r
    assert [s.action for s in r.steps] == ["canary-stop", "rollback"]  # and staging back
    assert "no longer holds production" in r.steps[0].detail
    assert _holder(repo, "production") == other and _holder(repo, "staging") == ids["set"]
    assert cand not in [
        m.to for m in api.history(repo, "macaron@production") if m.action == "promote"
    ]


def test_an_operator_retries_a_set_the_loop_rejected(loop, mint, repo, models):
    ids, score_router = loop
    score_router(api.commit(repo, "router", models["a2"], "router v2", author="al").id, 0.8)
    cand = api.improve(repo, "macaron", contract="quality").steps[0].commit
    add_traces(repo, ids["set"], "production", [0.9] * 6)
    add_traces(repo, cand, "canary", [0.0] * 6)
    assert api.improve(repo, "macaron", contract="quality").outcome == "stopped"
    assert api.improve(repo, "macaron", contract="quality").outcome == "idle"  # tried once

    before = snapshot(repo)
    one_line_error(mint("improve", "macaron", "--contract", "quality", "--reason", "x"))
    assert snapshot(repo) == before
    r = mint(
        "improve",
        "macaron",
        "--contract",
        "quality",
        "--retry",
        cand[:12],
        "--reason",
        "the scores were a bad day",
        "--json",
    )
    assert r.code == 0 and r.json()["outcome"] == "canary-started", r
    canary = api.canary_of(repo, "macaron@production")
    assert canary.candidate == cand and canary.started_by != "mint-loop"
    start = api.history(repo, "macaron@production")[-1]
    assert start.action == "canary-start" and start.by == canary.started_by
    assert start.reason.startswith(f"retry of {cand[:12]} by {start.by}, its canary stopped at #")
    assert "the scores were a bad day" in start.reason
    assert _holder(repo, "staging") == cand
    # one canary at a time: a second retry is refused in one line, and changes nothing
    before = snapshot(repo)
    again = mint("improve", "macaron", "--contract", "quality", "--retry", cand)
    one_line_error(again, "open canary")
    assert snapshot(repo) == before
