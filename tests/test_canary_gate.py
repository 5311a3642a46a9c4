"""A canary goes through the gate (issue 19, item 5).

A canary is a deployment: a share of real traffic reaches its candidate. Starting one on a
guarded channel needs the candidate's gate for that channel to pass, the gate `mint promote`
runs with its segregation of duties (an author's or pusher's own approval does not count on
a protected channel), or an admin's `--force --reason`, which history records. Through a real
`mint registry serve` and the real CLI, locally too, and `mint improve` waits at the gate.
"""

from __future__ import annotations

import pytest

from mint import api
from mint.cli import run_in_process

from conftest import Result, one_line_error
from support.loop import build_set
from support.registry import create_token, running_registry
from support.texts import MACARON

REF = "macaron@production"
PROD = """
name = "prod"
channel = "production"
approvals = 1
[[metric]]
name = "score"
min = 0.5
"""
EXIT_GATE = 3  # as `mint promote` and `mint gate` exit when the gate refuses


def guard_production(repo, tmp_path) -> None:
    """Contract prod (a score >= 0.5 and one approval) on production, which is protected."""
    (tmp_path / "prod.toml").write_text(PROD)
    api.contract_add(repo, tmp_path / "prod.toml", by="admin")
    code, _, err = run_in_process(["--repo", str(repo.root), "registry", "protect", "production"])
    assert code == 0, err


def set_v2(repo, models, tmp_path, author: str) -> str:
    """A second macaron whose chat expert is a new commit, both by AUTHOR."""
    api.commit(repo, "chat", models["a1"], "chat v2", author=author)
    folder = tmp_path / f"macaron-{author}"
    folder.mkdir()
    (folder / "mol.toml").write_text(MACARON)
    (folder / "route.md").write_text("Route the request to one expert.\n")
    (folder / "summary.md").write_text("Summarise the turn.\n")
    return api.set_commit(repo, folder / "mol.toml", "v2", author=author).id


def started(repo) -> list:
    return [m for m in api.history(repo, REF) if m.action == "canary-start"]


def assert_refused_with_the_table(r: Result) -> None:
    one_line_error(r, "gate refused", code=EXIT_GATE)
    assert "-> macaron@production" in r.out and "prod@v1" in r.out  # promote's table
    assert "CHECK" in r.out and "FAIL" in r.out


@pytest.fixture
def registry(repo, models, tmp_path, monkeypatch):
    """macaron v1 holds protected production, guarded by prod, behind a registry; mara (a
    maintainer) fetched the lines, authored macaron v2 on her laptop and pushed it."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    build_set(repo, models, tmp_path)
    api.promote(repo, "macaron", "production", by="alice")
    guard_production(repo, tmp_path)
    roles = {"mara": "maintainer", "ada": "admin"}
    tokens = {name: create_token(repo.root, name, role) for name, role in roles.items()}
    with running_registry(repo.root) as server:

        def mint(who: str, *args) -> Result:
            monkeypatch.setenv("MINT_TOKEN", tokens[who])
            return Result(*run_in_process([str(a) for a in args]))

        laptop, _ = api.init(tmp_path / "laptop")
        lines = ("router", "chat", "coding", "summary", "macaron")
        assert mint("mara", "--repo", laptop.root, "fetch", server.url, *lines).code == 0
        api.base_add(laptop, "tiny-llama", models["base"])
        v2 = set_v2(laptop, models, tmp_path, "mara")
        pushed = mint("mara", "--repo", laptop.root, "push", server.url, "chat", "macaron")
        assert pushed.code == 0, pushed
        yield server, mint, v2
        laptop.close()


def test_a_maintainer_cannot_canary_her_own_unevaluated_set_on_production(registry, repo):
    server, mint, v2 = registry
    canary = ("--repo", server.url, "canary", "start", REF, v2, "--fraction", "0.999999")
    r = mint("mara", *canary)
    assert_refused_with_the_table(r)
    assert "evaluation under prod v1" in r.out
    assert api.canary_of(repo, REF) is None and started(repo) == []

    # Her own evaluation and her own approval: the score passes, the approval does not count.
    assert (
        mint(
            "mara", "--repo", server.url, "eval", v2, "--contract", "prod", "--metric", "score=0.9"
        ).code
        == 0
    )
    assert mint("mara", "--repo", server.url, "approve", v2, "--channel", "production").code == 0
    r = mint("mara", *canary)
    assert_refused_with_the_table(r)
    assert "approvals" in next(line for line in r.out.splitlines() if "FAIL" in line)
    # Forcing protected production takes an admin, whatever the reason.
    forced = ("--force", "--reason", "my own call")
    one_line_error(mint("mara", *canary, *forced), "admin", code=1)
    assert api.canary_of(repo, REF) is None and started(repo) == []

    # An admin forces it, with a reason the history keeps beside the gate's evidence.
    r = mint("ada", *canary, "--force", "--reason", "incident 42: hotfix", "--json")
    assert r.code == 0, r
    c = api.canary_of(repo, REF)
    assert (c.candidate, c.fraction, c.started_by, c.reason) == (
        v2,
        0.999999,
        "ada",
        "incident 42: hotfix",
    )
    [start] = started(repo)
    assert (start.by, start.to) == ("ada", v2)
    assert "forced" in start.reason and "incident 42: hotfix" in start.reason
    assert start.contract is not None and len(start.evaluations) == 1


def test_a_canary_that_passes_the_gate_needs_no_force(registry, repo):
    server, mint, v2 = registry
    assert (
        mint(
            "mara", "--repo", server.url, "eval", v2, "--contract", "prod", "--metric", "score=0.9"
        ).code
        == 0
    )
    assert mint("ada", "--repo", server.url, "approve", v2, "--channel", "production").code == 0
    r = mint("mara", "--repo", server.url, "canary", "start", REF, v2, "--fraction", "0.5")
    assert r.code == 0, r
    [start] = started(repo)
    assert (start.by, start.reason) == ("mara", None) and len(start.evaluations) == 1


def test_the_same_refusal_locally(repo, models, tmp_path, mint, monkeypatch):
    build_set(repo, models, tmp_path)
    api.promote(repo, "macaron", "production", by="alice")
    guard_production(repo, tmp_path)
    monkeypatch.setenv("MINT_USER", "mara")
    v2 = set_v2(repo, models, tmp_path, "mara")
    assert mint("approve", v2, "--channel", "production").code == 0  # her own: does not count
    canary = ("canary", "start", REF, v2, "--fraction", "0.999999")
    assert_refused_with_the_table(mint(*canary))
    one_line_error(mint(*canary, "--force"), "needs a reason", code=2)
    assert api.canary_of(repo, REF) is None and started(repo) == []
    r = mint(*canary, "--force", "--reason", "load test")
    assert r.code == 0, r
    [start] = started(repo)
    assert start.by == "mara" and "load test" in start.reason and "forced" in start.reason


def test_improve_waits_at_production_s_gate(loop, repo, models, tmp_path):  # noqa: F811
    ids, score_router = loop
    guard_production(repo, tmp_path)  # prod asks for a score the loop records, and approval
    router2 = api.commit(repo, "router", models["a2"], "router v2", author="al").id
    score_router(router2, 0.8)
    r = api.improve(repo, "macaron", contract="quality")
    assert r.outcome == "refused", r
    assert r.steps[-1].action == "refuse" and r.steps[-1].channel == "production"
    assert "approvals" in r.steps[-1].detail
    assert api.canary_of(repo, REF) is None
    cand = r.steps[0].commit
    api.record_evaluation(repo, cand, "prod", {"score": 0.8}, source="manual", by="carol")
    api.approve(repo, cand, "production", by="carol")
    r = api.improve(repo, "macaron", contract="quality")
    assert r.outcome == "canary-started", r
    assert api.canary_of(repo, REF).candidate == cand
