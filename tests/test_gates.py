"""Contracts, evaluations, gates, promotion, approvals, rollback and history, through the CLI."""

import json
import shutil
import sys

import pytest

from mint import api

from conftest import one_line_error, snapshot
from support.concurrency import run_at_once

STAGING = """
name = "staging"
channel = "staging"
[[metric]]
name = "route_accuracy"
min = 0.9
"""

PRODUCTION = """
name = "production"
channel = "production"
requires = ["staging"]
approvals = 1
[[metric]]
name = "route_accuracy"
min = 0.97
[[metric]]
name = "chatbench"
max_regression = 0.01
"""


@pytest.fixture
def chat(mint, models, tmp_path):
    """Three commits on line `chat` and the two contracts; returns (mint, [ids], folder)."""
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    ids = [
        mint("commit", "chat", models[k], "-m", k, "--json").json()["id"]
        for k in ("a1", "a2", "a3")
    ]
    for name, text in (("staging", STAGING), ("production", PRODUCTION)):
        (tmp_path / f"{name}.toml").write_text(text)
        assert mint("contract", "add", tmp_path / f"{name}.toml").code == 0
    return mint, ids, tmp_path


def metric(mint, rev, contract, **values):
    args = [x for k, v in values.items() for x in ("--metric", f"{k}={v}")]
    r = mint("eval", rev, "--contract", contract, *args, "--json")
    assert r.code == 0, r
    return r.json()


def test_missing_metric_blocks_then_passing_commit_promotes(chat, repo):
    mint, ids, _ = chat
    metric(mint, ids[0], "staging", route_accuracy=0.5)
    r = mint("promote", ids[0], "--to", "staging")
    assert r.code == 3
    row = next(l for l in r.out.splitlines() if l.startswith("route_accuracy"))
    assert ">= 0.9" in row and "0.5" in row and "FAIL" in row
    one_line_error(mint("history", "chat@staging"), "unknown channel")

    ev = metric(mint, ids[0], "staging", route_accuracy=0.95)
    assert [c["ok"] for c in ev["checks"]] == [True]
    assert mint("promote", ids[0], "--to", "staging").code == 0
    (move,) = mint("history", "chat@staging", "--json").json()
    contract = mint("contract", "show", "staging", "--json").json()
    assert move["action"] == "promote" and move["to"] == ids[0] and move["from"] is None
    assert move["contract"] == contract["id"] and move["evaluations"] == [ev["id"]]
    assert api.resolve(repo, "chat@staging") == ids[0]


def test_gate_is_a_dry_run_with_the_same_exit(chat, repo):
    mint, ids, _ = chat
    before = snapshot(repo)
    assert mint("gate", ids[0], "--to", "staging").code == 3
    gate = mint("gate", ids[0], "--to", "staging", "--json")
    assert gate.code == 3 and not gate.json()["ok"]
    assert gate.json()["checks"][0]["check"].startswith("evaluation under staging v1")
    assert snapshot(repo) == before
    assert mint("gate", ids[0], "--to", "free-channel", "--json").json()["ok"]


def test_regression_requires_and_approvals(chat, repo, monkeypatch):
    mint, ids, _ = chat
    monkeypatch.setenv("MINT_USER", "alice")
    for cid in ids[:2]:
        metric(mint, cid, "staging", route_accuracy=0.99)
        assert mint("promote", cid, "--to", "staging").code == 0
    metric(mint, ids[0], "production", route_accuracy=0.98, chatbench=0.80)
    refused = api.gate(repo, ids[0], "production")
    assert [c.check for c in refused.checks if not c.ok] == ["approvals"]
    assert mint("approve", ids[0], "--channel", "production").code == 0
    assert "already" in mint("approve", ids[0], "--channel", "production").out  # counts once
    assert mint("promote", ids[0], "--to", "production").code == 0

    mint("approve", ids[1], "--channel", "production")
    metric(mint, ids[1], "production", route_accuracy=0.99, chatbench=0.78)
    r = mint("promote", ids[1], "--to", "production", "--json")
    assert r.code == 3
    failing = [c for c in r.json()["checks"] if not c["ok"]]
    assert [c["check"] for c in failing] == ["chatbench (regression)"]
    assert "0.79" in failing[0]["required"] and failing[0]["found"] == "0.78"
    metric(mint, ids[1], "production", route_accuracy=0.99, chatbench=0.795)
    assert mint("promote", ids[1], "--to", "production").code == 0

    # ids[2] never held staging
    mint("approve", ids[2], "--channel", "production")
    metric(mint, ids[2], "production", route_accuracy=0.99, chatbench=0.9)
    failing = [c for c in api.gate(repo, ids[2], "production").checks if not c.ok]
    assert [(c.check, c.found) for c in failing] == [("held chat@staging", "no")]
    assert api.resolve(repo, "chat@production") == ids[1]


def test_two_approvals_need_two_people(chat, repo, monkeypatch, tmp_path):
    mint, ids, _ = chat
    (tmp_path / "two.toml").write_text(
        'name = "two"\nchannel = "gold"\napprovals = 2\n[[metric]]\nname = "q"\nmin = 0\n'
    )
    mint("contract", "add", tmp_path / "two.toml")
    metric(mint, ids[0], "two", q=1)
    for user in ("bob", "bob"):
        monkeypatch.setenv("MINT_USER", user)
        mint("approve", ids[0], "--channel", "gold")
    assert mint("promote", ids[0], "--to", "gold").code == 3
    monkeypatch.setenv("MINT_USER", "carol")
    mint("approve", ids[0], "--channel", "gold")
    assert mint("promote", ids[0], "--to", "gold").code == 0


def test_new_contract_version_makes_old_evaluations_insufficient(chat, repo):
    mint, ids, folder = chat
    metric(mint, ids[0], "staging", route_accuracy=0.95)
    assert api.gate(repo, ids[0], "staging").ok
    assert "unchanged" in mint("contract", "add", folder / "staging.toml").out
    (folder / "staging.toml").write_text(STAGING.replace("0.9", "0.92"))
    added = mint("contract", "add", folder / "staging.toml", "--json").json()
    assert added["created"] and added["contract"]["version"] == 2
    report = api.gate(repo, ids[0], "staging")
    assert (
        not report.ok
        and report.checks[0].check == "evaluation under staging v2"
        and report.checks[0].found == "none"
    )
    metric(mint, ids[0], "staging", route_accuracy=0.95)
    assert api.gate(repo, ids[0], "staging").ok
    listed = mint("contract", "ls", "--json").json()
    assert [(c["name"], c["version"]) for c in listed] == [("production", 1), ("staging", 2)]


def test_rollback_walks_back_and_is_logged(chat, repo):
    mint, ids, _ = chat
    for cid in ids:
        assert mint("promote", cid, "--to", "canary").code == 0  # no contract: moves freely
    assert mint("rollback", "chat@canary", "--reason", "bad canary").code == 0
    assert api.resolve(repo, "chat@canary") == ids[1]
    assert mint("rollback", "chat@canary").code == 0
    assert api.resolve(repo, "chat@canary") == ids[0]
    one_line_error(mint("rollback", "chat@canary"), "nothing to roll back to")
    hist = mint("history", "chat@canary", "--json").json()
    assert [h["action"] for h in hist] == ["promote"] * 3 + ["rollback"] * 2
    assert [(h["from"], h["to"]) for h in hist[3:]] == [(ids[2], ids[1]), (ids[1], ids[0])]
    assert hist[3]["reason"] == "bad canary" and hist[3]["by"]
    assert mint("rollback", "chat@canary", "--to", ids[2]).code == 0
    assert api.resolve(repo, "chat@canary") == ids[2]
    assert mint("status", "--json").json()[0]["channels"] == {"canary": ids[2]}


def test_rollback_to_a_newcomer_goes_through_the_gate(chat, repo):
    mint, ids, _ = chat
    metric(mint, ids[0], "staging", route_accuracy=0.95)
    mint("promote", ids[0], "--to", "staging")
    r = mint("rollback", "chat@staging", "--to", ids[1])
    assert r.code == 3 and api.resolve(repo, "chat@staging") == ids[0]


def test_force_needs_a_reason_and_is_recorded(chat, repo):
    mint, ids, _ = chat
    before = snapshot(repo)
    one_line_error(mint("promote", ids[0], "--to", "staging", "--force"), "--reason")
    assert snapshot(repo) == before
    assert mint("promote", ids[0], "--to", "staging", "--force", "--reason", "hotfix").code == 0
    (move,) = mint("history", "chat@staging", "--json").json()
    assert move["action"] == "force" and move["reason"] == "hotfix"


def test_tag_and_channel_names_do_not_collide(chat, repo):
    mint, ids, _ = chat
    mint("tag", "v1", ids[0])
    one_line_error(mint("promote", ids[0], "--to", "v1"), "is a tag")
    mint("promote", ids[0], "--to", "canary")
    one_line_error(mint("tag", "canary", ids[0]), "is a channel")
    one_line_error(mint("promote", ids[0], "--to", "bad/name"), "invalid channel name")


EVALUATOR = """
name = "ev"
channel = "evaluated"
[[metric]]
name = "files"
min = 3
[evaluator]
command = {command}
timeout = {timeout}
"""


def _evaluator_contract(mint, folder, code, timeout=30):
    command = json.dumps([sys.executable, "-c", code, "{checkout}"])
    (folder / "ev.toml").write_text(EVALUATOR.format(command=command, timeout=timeout))
    assert mint("contract", "add", folder / "ev.toml").code == 0


def test_evaluator_runs_on_a_checkout(chat, repo):
    mint, ids, folder = chat
    code = (
        "import json, os, sys; print('noise'); "
        "print(json.dumps({'files': len(os.listdir(sys.argv[1]))}))"
    )
    _evaluator_contract(mint, folder, code)
    r = mint("eval", "chat", "--contract", "ev", "--json")
    assert r.code == 0, r
    ev = r.json()
    assert ev["metrics"] == {"files": 3.0} and ev["source"] == "evaluator"
    assert ev["evaluator"]["command"][0] == sys.executable and ev["by"]
    assert "pass" in mint("eval", "chat", "--contract", "ev").out
    assert mint("promote", "chat", "--to", "evaluated").code == 0


@pytest.mark.parametrize(
    "code, timeout, expect",
    [
        ("import sys; sys.exit(4)", 30, "exit status 4"),
        ("print('no json here')", 30, "no valid JSON"),
        ("import json; print(json.dumps({'other': 1}))", 30, "misses metric 'files'"),
        ("import time; time.sleep(60)", 1, "timeout"),
    ],
)
def test_bad_evaluators_record_nothing(chat, repo, code, timeout, expect):
    mint, ids, folder = chat
    _evaluator_contract(mint, folder, code, timeout)
    before = snapshot(repo)
    one_line_error(mint("eval", "chat", "--contract", "ev"), expect)
    assert snapshot(repo) == before


@pytest.mark.parametrize(
    "text, expect",
    [
        ("name = 'x'\nchannel = [", "not valid TOML"),
        (
            "name = 'x'\nchannel = 'c'\n[[metric]]\nname = 'm'\nminimum = 1\n",
            "unknown metric key 'minimum'",
        ),
        ("name = 'x'\nchannel = 'c'\ncolour = 1\n", "unknown key 'colour'"),
        ("name = 'x'\nchannel = 'c'\n[[metric]]\nname = 'm'\n", "sets none of"),
        ("channel = 'c'\n", "'name' must be a string"),
        ("name = 'x'\nchannel = 'c'\napprovals = -1\n", "approvals"),
    ],
)
def test_malformed_contracts(chat, repo, text, expect):
    mint, _, folder = chat
    (folder / "bad.toml").write_text(text)
    before = snapshot(repo)
    one_line_error(mint("contract", "add", folder / "bad.toml"), expect)
    assert snapshot(repo) == before


def test_bad_metric_input_and_unknown_channel(chat, repo):
    mint, ids, _ = chat
    before = snapshot(repo)
    one_line_error(
        mint("eval", ids[0], "--contract", "staging", "--metric", "bogus=1"),
        "unknown metric key 'bogus'",
    )
    one_line_error(
        mint("eval", ids[0], "--contract", "staging", "--metric", "route_accuracy=high"),
        "not a number",
    )
    one_line_error(
        mint("eval", ids[0], "--contract", "nosuch", "--metric", "a=1"), "unknown contract"
    )
    one_line_error(
        mint("eval", ids[0], "--contract", "staging", "--metric", "novalue"), "KEY=VALUE"
    )
    one_line_error(mint("rollback", "chat@nowhere"), "unknown channel")
    one_line_error(mint("history", "chat@nowhere"), "unknown channel")
    assert snapshot(repo) == before


def test_eight_promoters_on_one_channel(chat, repo, models, tmp_path):
    mint, _, _ = chat
    ids = []
    for i in range(8):
        folder = tmp_path / f"p{i}"
        shutil.copytree(models["a1"], folder)
        (folder / "README.md").write_text(f"candidate {i}\n")
        cid = mint("commit", "cand", folder, "-m", f"c{i}", "--json").json()["id"]
        metric(mint, cid, "staging", route_accuracy=0.95)
        ids.append(cid)
    results = run_at_once(
        [["--repo", str(repo.root), "promote", cid, "--to", "staging", "--json"] for cid in ids]
    )
    won = [cid for cid, r in zip(ids, results) if r.returncode == 0]
    for r in results:
        if r.returncode != 0:
            assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, (
                r.stderr
            )
    assert won, [r.stderr for r in results]
    hist = mint("history", "cand@staging", "--json").json()
    assert sorted(h["to"] for h in hist) == sorted(won)
    for prev, cur in zip(hist, hist[1:]):
        assert cur["from"] == prev["to"]  # every move saw the one before it
    assert api.resolve(repo, "cand@staging") == hist[-1]["to"]
