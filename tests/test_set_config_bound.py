"""A set commit's config is bound to its members (issue 19, "one way in"), against a real
`mint registry serve`: the id hashes the members but not the config, and serving and checkout
read the config. A pushed set whose config is not what `mint set commit` writes for its
members is refused (422) and nothing is stored; `mint fsck` reports such a stored row.

The registry holds lines `coding`, `coding-router` and `secret`; cody is a writer limited to
`coding*`. A laptop makes an honest set `coding-set` whose members are all on cody's lines,
and each case below is that set's wire form with its config or members altered."""

from __future__ import annotations

import contextlib
import copy
import dataclasses

import pytest
import sqlalchemy as sa

from mint import api
from mint import schema as s
from mint.bases import fingerprint
from mint.cli import run_in_process
from mint.commits import rows
from mint.exchange import sending
from mint.ids import utcnow

from conftest import Result
from support.pgdb import pg_database
from support.registry import create_token, error_of, start_registry
from support.wire import recompute_id

pytestmark = pytest.mark.xdist_group("registry")

MOL = """
name = "coding-set"
base = "tiny-llama"
[router]
adapter = "coding-router"
labels = ["chat", "coding"]
prompt = "route.md"
default = "chat"
[experts]
chat = "coding"
coding = "coding-router"
[summary]
adapter = "coding"
prompt = "summary.md"
"""


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def env(request, tmp_path_factory, models):
    with contextlib.ExitStack() as stack:
        url = None if request.param == "sqlite" else stack.enter_context(pg_database())
        folder = tmp_path_factory.mktemp(f"set-bound-{request.param}")
        reg, _ = api.init(folder / "registry", url)
        stack.callback(reg.close)
        api.base_add(reg, "tiny-llama", models["base"])
        ids = {
            line: api.commit(reg, line, models[m], line, author="ann").id
            for line, m in (("coding", "a1"), ("coding-router", "a3"), ("secret", "a2"))
        }
        tokens = {
            "ada": create_token(reg.root, "ada", "admin"),
            "cody": create_token(reg.root, "cody", "writer", ("coding*",)),
        }
        server = start_registry(reg.root)
        stack.callback(server.stop)
        yield dict(reg=reg, server=server, ids=ids, tokens=tokens, folder=folder)


def mint(env, monkeypatch, who: str, *args) -> Result:
    monkeypatch.setenv("MINT_TOKEN", env["tokens"][who])
    return Result(*run_in_process([str(a) for a in args]))


@pytest.fixture
def laptop(env, tmp_path, monkeypatch):
    """A work repository holding the registry's adapters and the honest set (its id, wire)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    work, _ = api.init(tmp_path / "work")
    url = env["server"].url
    for line in ("coding", "coding-router", "secret"):
        assert mint(env, monkeypatch, "ada", "--repo", work.root, "fetch", url, line).code == 0
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "mol.toml").write_text(MOL)
    (tmp_path / "set" / "route.md").write_text("Route the request to one expert.\n")
    (tmp_path / "set" / "summary.md").write_text("Summarise the turn.\n")
    cid = api.set_commit(work, tmp_path / "set" / "mol.toml", "a set", author="cody").id
    with work.db.read() as conn:
        wire = sending.commit_wire(conn, cid)
    with env["server"].client(env["tokens"]["cody"]) as http:  # the prompts, as a push sends
        for blob, _size in wire["files"].values():
            with work.store.open(blob) as f:
                answer = http.put(f"/api/v1/blobs/{blob}", content=f.read())
                assert answer.status_code in (200, 201), answer.text
    yield work, cid, wire
    work.close()


def secret_in_config(wire, ids):
    wire["config"]["experts"]["chat"] = ids["secret"]
    wire["config"]["summary"]["adapter"] = ids["secret"]


def other_expert(wire, ids):
    wire["config"]["experts"]["chat"] = ids["coding-router"]  # the member says `coding`


def extra_label(wire, ids):
    wire["config"]["router"]["labels"] = ["chat", "coding", "extra"]
    wire["config"]["experts"]["extra"] = ids["coding"]


def default_nowhere(wire, ids):
    wire["config"]["router"]["default"] = "nothing"


def no_members(wire, ids):
    wire["members"] = []


CASES = {
    "secret_in_config": (secret_in_config, "expert chat"),
    "other_expert": (other_expert, "expert chat"),
    "extra_label": (extra_label, "extra"),
    "default_nowhere": (default_nowhere, "router.default"),
    "no_members": (no_members, "no member"),
}


def stored(env, cid: str) -> bool:
    with env["reg"].db.read() as conn:
        return conn.execute(sa.select(s.commits.c.id).where(s.commits.c.id == cid)).first()


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_set_whose_config_is_not_its_members_is_refused_at_push(env, laptop, case):
    work, cid, honest = laptop
    alter, why = CASES[case]
    wire = copy.deepcopy(honest)
    alter(wire, env["ids"])
    recompute_id(wire)
    with env["server"].client(env["tokens"]["cody"]) as http:
        answer = http.post("/api/v1/objects", json={"commits": [wire]})
        error = error_of(answer, 422, "InvalidObject")
        assert why in error["message"], error
        head = http.post("/api/v1/lines/coding-set/head", json={"old": None, "new": wire["id"]})
        assert head.status_code >= 400
    assert not stored(env, wire["id"])
    assert "coding-set" not in {i.name for i in api.ls(env["reg"])}


def test_an_honest_set_is_pushed_and_fsck_reports_an_older_versions_row(env, laptop, monkeypatch):
    work, cid, _wire = laptop
    url = env["server"].url
    assert mint(env, monkeypatch, "cody", "--repo", work.root, "push", url, "coding-set").code == 0
    reg = env["reg"]
    assert api.resolve(reg, "coding-set") == cid
    clean = mint(env, monkeypatch, "ada", "--repo", reg.root, "fsck")
    assert clean.code == 0 and ": 0 problems" in clean.out, clean
    # What an older version's push stored: the honest set's content with secret's id in its
    # config (its id does not hash the config), written directly, as no command now would.
    with reg.db.read() as conn:
        d = rows.detail(conn, cid)
    config = copy.deepcopy(d.config)
    config["experts"]["chat"] = env["ids"]["secret"]
    bad = rows.build_commit(
        **{
            f.name: getattr(d, f.name)
            for f in dataclasses.fields(rows.NewCommit)
            if f.name not in ("parents", "message", "config")
        },
        parents=[cid],
        message="stored by an older version",
        config=config,
    )
    with reg.db.write() as conn:
        rows.insert_commit(conn, bad, utcnow())
    report = mint(env, monkeypatch, "ada", "--repo", reg.root, "fsck")
    assert report.code != 0, report
    assert f"set commit {bad.id}" in report.out and "expert chat" in report.out, report


def test_a_set_on_another_base_than_its_members_is_refused_at_push(env, laptop):
    """`set commit` pins only members on the set's base (pin_member); a pushed set bound to
    another base (its own, pushed with it) over the same members is refused the same way."""
    _work, _cid, honest = laptop
    config = {"model_type": "llama", "hidden_size": 8, "note": "another base"}
    other = {"name": "other-base", "fingerprint": fingerprint(config), "config": config}
    wire = copy.deepcopy(honest)
    wire["base"], wire["base_fingerprint"] = other["name"], other["fingerprint"]
    wire["config"]["base"] = other["name"]
    recompute_id(wire)
    with env["server"].client(env["tokens"]["cody"]) as http:
        answer = http.post("/api/v1/objects", json={"bases": [other], "commits": [wire]})
        error = error_of(answer, 422, "BaseMismatch")
        assert "bound to base tiny-llama" in error["message"], error
    assert not stored(env, wire["id"])
    with env["reg"].db.read() as conn:  # nothing half-stored: not even the base
        names = {r.name for r in conn.execute(sa.select(s.bases.c.name))}
    assert names == {"tiny-llama"}
