"""Contracts, tokens and gates per team (issue 37): a contract is its name within its scope
(`lines = ["team-a/*"]`), so two teams each keep a `production` contract in one registry and
each gates its own lines; a push that carries a team's contract conflicts only with the same
name and scope, and the hint says what to do in either case. Token globs name namespaces.
"""

from __future__ import annotations

import pytest

from mint import api
from mint.cli import run_in_process

from conftest import Result, one_line_error
from support.hubupload import hub_registry

pytestmark = pytest.mark.xdist_group("registry")

# The demo's production: the router's routing accuracy, for team A's lines.
ROUTERS = """
name = "production"
channel = "production"
lines = ["team-a/*"]
[[metric]]
name = "route_accuracy"
min = 0.9
"""

# A chat team's production: bounds on its own metric, for team B's lines.
CHATS = """
name = "production"
channel = "production"
lines = ["team-b/*"]
[[metric]]
name = "chatbench"
min = 0.5
max = 1.0
"""

RELEASE = """
name = "release"
channel = "release"
[[metric]]
name = "score"
min = 0.5
"""


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def hub(request, tmp_path_factory, models):
    folder = tmp_path_factory.mktemp(f"teams-{request.param}")
    with hub_registry(request.param, folder, models) as h:
        for name, text in (("routers", ROUTERS), ("release", RELEASE)):
            (folder / f"{name}.toml").write_text(text)
            api.contract_add(h.repo, folder / f"{name}.toml", by="admin")
        api.commit(h.repo, "team-a/router", models["a1"], "a router", author="team-a")
        yield h


def mint(hub, who: str | None, *args) -> Result:
    """`mint ARGS...` with WHO's token in MINT_TOKEN (a path or URL is in ARGS)."""
    with pytest.MonkeyPatch.context() as env:
        if who:
            env.setenv("MINT_TOKEN", hub.tokens[who])
        return Result(*run_in_process([str(a) for a in args]))


def test_a_tokens_globs_name_a_namespace(hub):
    made = mint(
        hub,
        None,
        "--repo",
        hub.repo.root,
        "registry",
        "token",
        "create",
        "team-c",
        "--role",
        "writer",
        "--lines",
        "team-c/*",
        "--json",
    )
    assert made.code == 0, made  # was: invalid line glob name
    assert made.json()["lines"] == ["team-c/*"]
    refused = mint(
        hub,
        None,
        "--repo",
        hub.repo.root,
        "registry",
        "token",
        "create",
        "x",
        "--role",
        "writer",
        "--lines",
        "team c/*",
    )
    one_line_error(refused, "line glob")


def test_two_teams_each_keep_production_and_gate_their_own_lines(hub, models, tmp_path):
    (tmp_path / "chats.toml").write_text(CHATS)
    added = api.contract_add(hub.repo, tmp_path / "chats.toml", by="admin")
    assert (added.contract.name, added.contract.version) == ("production", 1)
    productions = [c for c in api.contract_ls(hub.repo) if c.name == "production"]
    assert sorted(c.lines[0] for c in productions) == ["team-a/*", "team-b/*"]
    chat = api.commit(hub.repo, "team-b/chat", models["a2"], "a chat", author="team-b").id
    router = api.resolve(hub.repo, "team-a/router")
    for rev, metric in ((router, "route_accuracy"), (chat, "chatbench")):
        report = api.gate(hub.repo, rev, "production")
        assert report.contracts == ["production@v1"]
        assert {c.check for c in report.checks} == {"evaluation under production v1", metric}
    # Which production: the line says.
    r = mint(
        hub,
        "writer",
        "--repo",
        hub.url,
        "eval",
        "team-b/chat",
        "--contract",
        "production",
        "--metric",
        "chatbench=0.7",
        "--json",
    )
    assert r.code == 0, r
    assert api.gate(hub.repo, chat, "production").ok
    line = one_line_error(
        mint(hub, "reader", "--repo", hub.url, "contract", "show", "production"),
        "2 contracts named production",
    )
    assert "team-a/*" in line and "team-b/*" in line
    shown = mint(
        hub,
        "reader",
        "--repo",
        hub.url,
        "contract",
        "show",
        "production",
        "--line",
        "team-b/chat",
        "--json",
    )
    assert shown.json()["metrics"][0]["name"] == "chatbench"


def _team_b(tmp_path, models, contract: str, line: str = "team-b/notes"):
    """A repository of team B's with CONTRACT, and LINE evaluated under it."""
    other, _ = api.init(tmp_path / "team-b")
    api.base_add(other, "tiny-llama", models["base"])
    (tmp_path / "c.toml").write_text(contract)
    name = api.contract_add(other, tmp_path / "c.toml", by="bob").contract
    api.commit(other, line, models["a3"], "theirs", author="bob")
    metric = name.metrics[0]["name"]
    api.record_evaluation(other, line, name.name, {metric: 0.8}, source="manual", by="bob")
    other.close()
    return other


def test_a_push_carrying_another_teams_production_lands(hub, models, tmp_path):
    chats = CHATS.replace("chatbench", "notesbench").replace('"team-b/*"', '"team-n/*"')
    other = _team_b(tmp_path, models, chats, "team-n/notes")
    pushed = mint(hub, "admin", "--repo", other.root, "push", hub.url, "team-n/notes")
    assert pushed.code == 0, pushed  # was: contract production v1 differs
    report = api.gate(hub.repo, "team-n/notes", "production")
    assert report.ok and {c.check for c in report.checks} == {"notesbench"}


def test_a_conflict_is_the_same_name_and_scope_and_the_hint_fits_each_case(hub, models, tmp_path):
    # Both for every line: perhaps another team's; the fix is to scope it.
    other = _team_b(tmp_path / "a", models, RELEASE.replace("0.5", "0.7"), "team-r/notes")
    line = one_line_error(
        mint(hub, "admin", "--repo", other.root, "push", hub.url, "team-r/notes"),
        "contract release v1 (for every line) differs",
    )
    assert 'scope it with lines = ["TEAM/*"]' in line
    # The same team's scope: the registry's is the contract; adopt it, or a new version.
    other = _team_b(tmp_path / "b", models, ROUTERS.replace("0.9", "0.8"), "team-a/notes")
    line = one_line_error(
        mint(hub, "admin", "--repo", other.root, "push", hub.url, "team-a/notes"),
        "contract production v1 (for lines team-a/*)",
    )
    assert "mint contract add" in line and "scope it" not in line
    assert "team-a/notes" not in {i.name for i in api.ls(hub.repo)}
