"""The loop with the contract of whichever channel it guards: a contract for the target
channel alone (no staging step: the candidate is gated by that contract and canaried
straight against it), `--to` a channel other than production, and a contract for a
channel that is neither staging nor the target, refused in one line."""

import json
import sys

from mint import api

from conftest import one_line_error, snapshot
from support.loop import EVALUATOR, add_traces, build_set


def _guarded(repo, models, tmp_path, channel: str, target: str):
    """Set macaron v1 on TARGET; contract `q` guards CHANNEL with the table-driven
    evaluator and a [live] table. Returns (ids, score_router: commit, score -> None)."""
    ids = build_set(repo, models, tmp_path)
    script, table = tmp_path / "evaluate.py", tmp_path / "scores.json"
    script.write_text(EVALUATOR)
    table.write_text("{}")
    command = json.dumps([sys.executable, str(script), "{checkout}", str(table)])
    contract = tmp_path / "q.toml"
    contract.write_text(
        f'name = "q"\nchannel = "{channel}"\n'
        '[[metric]]\nname = "score"\nmin = 0.5\nmax_regression = 0.05\n'
        f"[evaluator]\ncommand = {command}\n"
        "[live]\nmin_score = 0.5\nmax_drop = 0.05\nmin_traces = 3\n"
    )
    api.contract_add(repo, contract, by="alice")
    api.evaluate(repo, ids["set"], "q", by="alice")
    api.promote(repo, ids["set"], target, by="alice")

    def score_router(commit: str, score: float) -> None:
        table.write_text(json.dumps(json.loads(table.read_text()) | {commit: score}))

    return ids, score_router


def _channels(repo) -> dict:
    return next(s for s in api.status(repo) if s.name == "macaron").channels


def test_a_contract_for_production_alone_canaries_straight_against_it(repo, models, tmp_path):
    ids, score_router = _guarded(repo, models, tmp_path, "production", "production")
    router2 = api.commit(repo, "router", models["a2"], "router v2", author="al").id
    score_router(router2, 0.8)

    r = api.improve(repo, "macaron", contract="q")
    assert r.outcome == "canary-started", r
    assert [s.action for s in r.steps] == ["derive", "evaluate", "canary-start"]
    cand = r.steps[0].commit
    assert r.steps[-1].channel == "production"
    assert set(_channels(repo)) == {"production"}  # no staging channel was made
    assert api.canary_of(repo, "macaron@production").candidate == cand

    add_traces(repo, ids["set"], "production", [0.1] * 5)
    add_traces(repo, cand, "canary", [1.0] * 5)
    r = api.improve(repo, "macaron", contract="q")
    assert r.outcome == "promoted", r
    assert _channels(repo) == {"production": cand}
    promoted = api.history(repo, "macaron@production")[-2]
    assert promoted.action == "promote" and promoted.by == "mint-loop"
    assert promoted.evaluations  # gated by production's contract: its evidence is kept


def test_a_contract_for_production_refuses_a_worse_candidate_at_its_gate(repo, models, tmp_path):
    ids, score_router = _guarded(repo, models, tmp_path, "production", "production")
    worse = api.commit(repo, "router", models["a3"], "router v3", author="al").id
    score_router(worse, 0.3)
    r = api.improve(repo, "macaron", contract="q")
    assert r.outcome == "refused", r
    assert [s.action for s in r.steps] == ["derive", "evaluate", "refuse"]
    assert r.steps[-1].channel == "production" and "score 0.3 (needs >= 0.5)" in r.steps[-1].detail
    assert api.canary_of(repo, "macaron@production") is None
    assert _channels(repo) == {"production": ids["set"]}


def test_to_another_channel_through_staging(mint, repo, models, tmp_path):
    ids, score_router = _guarded(repo, models, tmp_path, "staging", "release")
    api.promote(repo, ids["set"], "staging", by="alice")
    router2 = api.commit(repo, "router", models["a2"], "router v2", author="al").id
    score_router(router2, 0.8)

    r = mint("improve", "macaron", "--contract", "q", "--to", "release", "--json")
    assert r.code == 0, r
    out = r.json()
    assert out["outcome"] == "canary-started"
    steps = [(s["action"], s["channel"]) for s in out["steps"]]
    assert steps == [("derive", None), ("evaluate", None), ("promote", "staging")] + [
        ("canary-start", "release")
    ]
    cand = out["steps"][0]["commit"]
    assert api.canary_of(repo, "macaron@release").candidate == cand
    assert "production" not in _channels(repo)

    add_traces(repo, ids["set"], "release", [0.9] * 5)
    add_traces(repo, cand, "canary", [0.1] * 5)
    text = mint("improve", "macaron", "--contract", "q", "--to", "release")
    assert text.code == 0 and "stopped" in text.out, text
    stopped = api.history(repo, "macaron@release")[-1].reason
    assert "canary against release: difference -0.800" in stopped and "mean 0.900" in stopped
    assert _channels(repo) == {"release": ids["set"], "staging": ids["set"]}


def test_to_another_channel_with_its_own_contract(mint, repo, models, tmp_path):
    ids, score_router = _guarded(repo, models, tmp_path, "release", "release")
    router2 = api.commit(repo, "router", models["a2"], "router v2", author="al").id
    score_router(router2, 0.8)
    r = mint("improve", "macaron", "--contract", "q", "--to", "release", "--json")
    assert r.code == 0 and r.json()["outcome"] == "canary-started", r
    assert [s["action"] for s in r.json()["steps"]] == ["derive", "evaluate", "canary-start"]
    assert api.canary_of(repo, "macaron@release").candidate == r.json()["steps"][0]["commit"]
    assert set(_channels(repo)) == {"release"}


def test_a_contract_for_neither_channel_is_one_line(mint, repo, models, tmp_path):
    _guarded(repo, models, tmp_path, "dev", "production")
    before = snapshot(repo)
    line = one_line_error(mint("improve", "macaron", "--contract", "q"), "guards channel dev")
    assert "staging or for production" in line
    # the contract for release guards neither staging nor production
    one_line_error(
        mint("improve", "macaron", "--contract", "q", "--to", "release"), "staging or for release"
    )
    one_line_error(mint("improve", "macaron", "--contract", "q", "--to", "bad name"), "channel")
    assert snapshot(repo) == before
