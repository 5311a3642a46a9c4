"""Proposals (issue 37): a contributor who may not write a line offers it a commit, with the
Hub's `create_commit(create_pr=True)` or `mint commit --propose`; the line's writers merge it
(`merge_pull_request`, `mint proposal merge`) or close it. One real registry per database for
the module, its line team-a/chat guarded on production by team A's contract; each test works
on proposals of its own.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import sqlalchemy as sa
from huggingface_hub import snapshot_download
from huggingface_hub.errors import HfHubHTTPError

from mint import api
from mint import schema as s
from mint.cli import run_in_process

from conftest import Result
from support.browser import chromium, sign_in, wait_for
from support.hubupload import files_of, hub_registry, variant

pytestmark = pytest.mark.xdist_group("registry")

TEAM_A_PRODUCTION = """
name = "production"
channel = "production"
lines = ["team-a/*"]
approvals = 1
[[metric]]
name = "accuracy"
min = 0.5
"""

SET = """
name = "team-a/macaron"
protocol = "mol/1"
base = "tiny-llama"
[router]
adapter = "team-a/router"
labels = ["chat"]
prompt = "route.md"
default = "chat"
[experts]
chat = "team-a/chat"
[summary]
adapter = "team-a/chat"
prompt = "summary.md"
"""


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def hub(request, tmp_path_factory, models):
    folder = tmp_path_factory.mktemp(f"proposals-{request.param}")
    with hub_registry(request.param, folder, models) as h:
        (folder / "production.toml").write_text(TEAM_A_PRODUCTION)
        api.contract_add(h.repo, folder / "production.toml", by="admin")
        api.protect(h.repo, "production", "maintainer", by="admin")
        h.api("team-a").upload_folder(
            repo_id="team-a/chat", folder_path=models["a1"], commit_message="the line's first"
        )
        yield h


def cli(hub, who: str, *args) -> Result:
    """`mint --repo URL ARGS...` as WHO (MINT_TOKEN)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MINT_TOKEN", hub.tokens[who])
        return Result(*run_in_process(["--repo", hub.url, *map(str, args)]))


def test_a_contributor_proposes_and_a_writer_merges(hub, models, tmp_path):
    head = api.resolve(hub.repo, "team-a/chat")
    offered = variant(models["a2"], tmp_path / "offer", "offer")
    info = hub.api("contrib").upload_folder(
        repo_id="team-a/chat",
        folder_path=offered,
        commit_message="a better chat",
        commit_description="trained on more turns",
        create_pr=True,
    )
    n = int(info.pr_revision.rsplit("/", 1)[1])
    assert info.pr_revision == f"refs/pr/{n}" and api.resolve(hub.repo, "team-a/chat") == head
    got = snapshot_download(
        "team-a/chat",
        revision=info.pr_revision,
        endpoint=hub.url,
        token=hub.tokens["reader"],
        cache_dir=tmp_path / "c",
    )
    assert files_of(got) == files_of(offered)
    refs = hub.api("reader").list_repo_refs("team-a/chat", include_pull_requests=True)
    assert (info.pr_revision, info.oid) in {(r.ref, r.target_commit) for r in refs.pull_requests}
    listed = {d.num: d for d in hub.api("reader").get_repo_discussions("team-a/chat")}
    assert listed[n].author == "contrib" and listed[n].status == "open"
    assert listed[n].is_pull_request and listed[n].title == "a better chat"
    details = hub.api("reader").get_discussion_details("team-a/chat", n)
    assert details.target_branch == "refs/heads/main" and "adapter_config.json" in details.diff
    with pytest.raises(HfHubHTTPError) as caught:  # a contributor merges nothing, even its own
        hub.api("contrib").merge_pull_request("team-a/chat", n)
    assert caught.value.response.status_code == 403
    assert "writer role" in caught.value.server_message
    hub.api("team-a").merge_pull_request("team-a/chat", n)
    assert api.resolve(hub.repo, "team-a/chat").startswith(info.oid)
    merged = api.proposal_show(hub.repo, "team-a/chat", n).proposal
    assert (merged.status, merged.by, merged.closed_by) == ("merged", "contrib", "team-a")
    with hub.repo.db.read() as conn:
        h = s.ref_history.c
        q = sa.select(s.ref_history).where(h.line == "team-a/chat", h.action == "merge")
        move = conn.execute(q.order_by(h.id.desc())).first()
    assert (move.by, move.old, move.new[:40]) == ("team-a", head, info.oid)
    assert move.reason == f"merged proposal {n} (refs/pr/{n}) by contrib"
    with pytest.raises(HfHubHTTPError) as caught:
        hub.api("team-a").merge_pull_request("team-a/chat", n)
    assert caught.value.response.status_code == 409
    assert api.fsck(hub.repo).ok


@pytest.mark.parametrize(
    "who, line, words",
    [
        ("reader", "team-a/chat", "contributor role"),
        ("contrib", "team-b/chat", "outside the token's lines"),
    ],
)
def test_who_may_not_propose_is_told_why(hub, models, tmp_path, who, line, words):
    before = api.proposal_ls(hub.repo)
    with pytest.raises(HfHubHTTPError) as caught:
        hub.api(who).upload_folder(
            repo_id=line,
            folder_path=variant(models["a2"], tmp_path / "p", "p"),
            commit_message="x",
            create_pr=True,
        )
    assert caught.value.response.status_code == 403 and words in caught.value.server_message
    assert api.proposal_ls(hub.repo) == before


def test_the_proposers_own_approval_does_not_count(hub, models, tmp_path):
    info = hub.api("maint").upload_folder(
        repo_id="team-a/chat",
        folder_path=variant(models["a3"], tmp_path / "m", "m"),
        commit_message="mine",
        create_pr=True,
    )
    cid = api.resolve(hub.repo, info.oid)
    with hub.client("maint") as c:
        assert c.post("/api/v1/approvals", json={"rev": cid, "channel": "production"}).is_success

    def approvals():
        report = api.gate(hub.repo, cid, "production")
        return next(c.found for c in report.checks if c.check == "approvals")

    assert approvals() == "0"
    with hub.client("admin") as c:
        assert c.post("/api/v1/approvals", json={"rev": cid, "channel": "production"}).is_success
    assert approvals() == "1"


def test_a_proposal_is_closed_by_its_proposer_and_stays_closed(hub, models, tmp_path):
    info = hub.api("contrib").upload_folder(
        repo_id="team-a/chat",
        folder_path=variant(models["a2"], tmp_path / "c", "c"),
        commit_message="maybe",
        create_pr=True,
    )
    n = int(info.pr_revision.rsplit("/", 1)[1])
    event = hub.api("contrib").change_discussion_status("team-a/chat", n, "closed")
    assert event.new_status == "closed"
    with pytest.raises(HfHubHTTPError) as caught:
        hub.api("contrib").change_discussion_status("team-a/chat", n, "open")
    assert caught.value.response.status_code == 409
    with pytest.raises(HfHubHTTPError):
        hub.api("team-a").merge_pull_request("team-a/chat", n)
    assert api.proposal_show(hub.repo, "team-a/chat", n).proposal.closed_by == "contrib"


def test_mint_commit_and_set_derive_propose_through_the_registry(hub, models, tmp_path):
    r = cli(
        hub,
        "contrib",
        "commit",
        "team-a/chat",
        variant(models["a2"], tmp_path / "cli", "cli"),
        "-m",
        "from the CLI",
        "--propose",
    )
    assert r.code == 0 and "proposal" in r.out, r
    listed = cli(hub, "reader", "proposal", "ls", "team-a/chat", "--status", "open", "--json")
    mine = [p for p in listed.json() if p["title"] == "from the CLI"]
    assert len(mine) == 1 and mine[0]["by"] == "contrib"
    n = mine[0]["number"]
    shown = cli(hub, "reader", "proposal", "show", "team-a/chat", n, "--json").json()
    assert [g["channel"] for g in shown["gates"]] == ["production"]
    assert "adapter_config.json" in shown["diff"]["files"]
    refused = cli(hub, "contrib", "proposal", "merge", "team-a/chat", n)
    assert refused.code == 1 and "writer role" in refused.err and "Traceback" not in refused.err
    assert cli(hub, "team-a", "proposal", "merge", "team-a/chat", n).code == 0
    assert api.resolve(hub.repo, "team-a/chat") == mine[0]["commit_id"]
    # A team offers its new expert to the owners of a set.
    api.commit(hub.repo, "team-a/router", models["a1"], "router", author="team-a")
    mol = tmp_path / "set"
    mol.mkdir()
    (mol / "mol.toml").write_text(SET)
    (mol / "route.md").write_text("route\n")
    (mol / "summary.md").write_text("sum\n")
    api.set_commit(hub.repo, mol / "mol.toml", "the set", author="team-a")
    api.commit(hub.repo, "team-a/expert", models["a3"], "a new expert", author="contrib")
    r = cli(
        hub,
        "contrib",
        "set",
        "derive",
        "team-a/macaron",
        "--use",
        "chat=team-a/expert",
        "--propose",
        "--json",
    )
    assert r.code == 0, r
    offered = r.json()
    assert offered["proposal"] and api.resolve(hub.repo, "team-a/macaron") != offered["id"]
    derived = api.show(hub.repo, offered["id"])
    assert {m.label: m.commit_id for m in derived.members}["chat"] == api.resolve(
        hub.repo, "team-a/expert"
    )
    n = offered["proposal"]
    refused = cli(hub, "reader", "proposal", "close", "team-a/macaron", n)
    assert refused.code == 1 and "contributor role" in refused.err
    closed = cli(hub, "contrib", "proposal", "close", "team-a/macaron", n, "--json")
    assert closed.code == 0 and closed.json()["status"] == "closed", closed


def test_a_local_repository_proposes_and_merges_too(repo, models, mint):
    api.base_add(repo, "tiny-llama", models["base"])
    api.commit(repo, "chat", models["a1"], "one", author="owner")
    r = mint("commit", "chat", models["a2"], "-m", "offered", "--propose", "--json")
    assert r.code == 0, r
    assert r.json()["proposal"] == 1 and api.show(repo, "chat").message == "one"
    assert mint("proposal", "merge", "chat", "1").code == 0
    assert api.show(repo, "chat").message == "offered"
    again = mint("proposal", "merge", "chat", "1")
    assert again.code == 1 and "is merged" in again.err


def test_the_proposal_page_shows_its_diff_evaluations_and_gate(hub, models, tmp_path):
    info = hub.api("contrib").upload_folder(
        repo_id="team-a/chat",
        folder_path=variant(models["a2"], tmp_path / "w", "w"),
        commit_message="for the page",
        create_pr=True,
    )
    n = int(info.pr_revision.rsplit("/", 1)[1])
    cid = api.resolve(hub.repo, info.oid)
    api.record_evaluation(
        hub.repo, cid, "production", {"accuracy": 0.4}, source="manual", by="evaluator"
    )
    browser = chromium(Path(tempfile.mkdtemp(prefix="chromium-", dir=tmp_path)))
    try:
        sign_in(browser, hub.url, hub.tokens["reader"])
        browser.get(f"{hub.url}/proposal/team-a/chat/{n}")
        wait_for(browser, lambda: browser.find_element("id", "status").text == "open")
        paths = [
            e.get_attribute("data-path")
            for e in browser.find_elements("css selector", "#files tr[data-path]")
        ]
        assert "adapter_config.json" in paths
        evals = browser.find_element("id", "evaluations").text
        assert "production v1" in evals and "accuracy=0.4" in evals and "manual" in evals
        gate = browser.find_element("id", "gate-production")
        assert gate.get_attribute("data-ok") == "no"
        assert "accuracy" in gate.text and "FAIL" in gate.text and "approvals" in gate.text
        assert "would refuse this commit" in gate.text
        assert browser.find_element("id", "proposer").text == "contrib"
    finally:
        browser.quit()
    shown = json.loads(cli(hub, "reader", "proposal", "show", "team-a/chat", n, "--json").out)
    assert shown["gates"][0]["checks"][0]["found"] == "0.4"
