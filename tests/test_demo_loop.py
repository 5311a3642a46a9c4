"""`make demo-loop`, run once as a user runs it: the loop of learning from deployment, end to
end, through a real `mint serve`, real feedback, real exports, the gate and a canary.

The only test that runs the whole loop (a few minutes on two cores): it checks the summary
the loop writes and, through the API, the repository the loop leaves behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mint import api

pytestmark = pytest.mark.xdist_group("demo-loop")


@pytest.fixture(scope="module")
def loop_run(tmp_path_factory):
    """Run `python -m mint.examples.loop --work DIR --summary FILE` once; the summary, the
    repository it left and its output."""
    tmp = tmp_path_factory.mktemp("demo-loop")
    work, summary = tmp / "work", tmp / "summary.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINT_")}
    proc = subprocess.run(
        [sys.executable, "-m", "mint.examples.loop", "--work", work, "--summary", summary],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp,
        timeout=1500,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    return json.loads(summary.read_text()), api.open_repo(work / "project"), output


def test_routing_accuracy_rises_round_over_round(loop_run):
    summary, _, output = loop_run
    rounds = summary["rounds"]
    assert [r["round"] for r in rounds] == [0, 1, 2]
    accuracy = [r["accuracy"] for r in rounds]
    assert accuracy[0] < accuracy[1] < accuracy[2], accuracy
    # the seed router knows one phrasing family of three; the last knows them all
    assert accuracy[0] < 0.7 and accuracy[2] > 0.85, accuracy
    live = [r["live_score"] for r in rounds]
    assert live[0] < live[2], live
    assert all(r["live_traces"] > 0 for r in rounds)
    # each round's production is another set, with another router
    assert len({r["set"] for r in rounds}) == 3 and len({r["router"] for r in rounds}) == 3
    assert "ROUND 2" in output


def test_each_new_router_names_the_export_it_learned_from(loop_run):
    summary, repo, _ = loop_run
    for r in summary["rounds"][1:]:
        commit = api.show(repo, r["router"])
        assert commit.meta["data"] == r["dataset"]
        dataset = api.dataset_show(repo, r["dataset"])
        assert dataset.format == "router" and dataset.records > 0
        assert r["trained_on"] > dataset.records  # seed + the exported examples
    assert summary["exports"][1]["records"] > summary["exports"][0]["records"]


def test_production_history_shows_the_loops_promotions_with_evidence(loop_run):
    summary, repo, _ = loop_run
    moves = api.history(repo, "macaron@production")
    sets = [r["set"] for r in summary["rounds"]]
    promotions = [m for m in moves if m.action == "promote" and m.to in sets[1:]]
    assert [m.to for m in promotions] == sets[1:]
    contract = api.contract_show(repo, "staging")
    for move in promotions:
        assert move.by == summary["loop_identity"] == "mint-loop", move
        # the evidence: the contract it passed, its evaluation, and the live numbers
        assert move.contract == contract.id and move.evaluations, move
        assert "live: canary mean" in move.reason, move
    # each promotion followed a canary the loop started and stopped as promoted
    canaries = [(m.action, m.to, m.by) for m in moves if m.action.startswith("canary")]
    for promoted in sets[1:]:
        assert ("canary-start", promoted, "mint-loop") in canaries
        assert ("canary-stop", promoted, "mint-loop") in canaries
    assert api.resolve(repo, "macaron@production") == sets[2]


def test_the_bad_candidate_never_holds_production_at_the_end(loop_run):
    summary, repo, _ = loop_run
    bad = summary["bad_candidate"]
    assert bad["fate"] in ("refused", "rolled back"), bad
    final = api.resolve(repo, "macaron@production")
    assert final == summary["rounds"][2]["set"]
    assert api.show(repo, final).config["router"]["adapter"] != bad["router"]
    if bad["fate"] == "refused":
        held = [m.to for m in api.history(repo, "macaron@production")]
        assert bad.get("set") not in held
