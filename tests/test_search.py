"""`mint search`: commits by meta, evaluation metrics, tags, line glob and author, AND-ed,
newest first, as `mint log` shows them; the same on a registry (GET /api/v1/search, limited
to the token's lines) and through `--repo URL`; a condition that is not one is one line
(400 on the API); migration 0008 fills the index from the rows stored before it."""

import pytest
import sqlalchemy as sa
from alembic import command

import mint.search
from mint import api
from mint import schema as s
from mint.cli import run_in_process
from mint.db import alembic_config

from conftest import Result, one_line_error, snapshot
from support.registry import create_token, error_of, running_registry


def _contract(repo, tmp_path) -> None:
    path = tmp_path / "q.toml"
    path.write_text('name = "q"\nchannel = "staging"\n[[metric]]\nname = "acc"\nmin = 0.1\n')
    api.contract_add(repo, path, by="alice")


def _evaluate(repo, rev: str, **metrics) -> None:
    api.record_evaluation(repo, rev, "q", metrics, source="manual", by="alice")


@pytest.fixture
def catalog(repo, models, tmp_path):
    """chat: c1 (alice, lr 0.001, data v1, acc 0.7), c2 (bob, lr 0.01, acc 0.9 then 0.6);
    team/coding: c3 (alice, lr 0.001, epochs 3, acc 0.95). Tags v1 on chat@c1 and on
    team/coding@c3. Returns {name: commit id}."""
    api.base_add(repo, "tiny-llama", models["base"])
    _contract(repo, tmp_path)
    meta1 = {"lr": "0.001", "data": "v1"}
    c1 = api.commit(repo, "chat", models["a1"], "first", author="alice", meta=meta1).id
    c2 = api.commit(repo, "chat", models["a2"], "second", author="bob", meta={"lr": "0.01"}).id
    meta3 = {"lr": "0.001", "epochs": 3}
    c3 = api.commit(repo, "team/coding", models["a3"], "third", author="alice", meta=meta3).id
    api.tag(repo, "chat@v1", c1, by="alice")
    api.tag(repo, "team/coding@v1", c3, by="alice")
    _evaluate(repo, c1, acc=0.7)
    _evaluate(repo, c2, acc=0.9)
    _evaluate(repo, c2, acc=0.6)
    _evaluate(repo, c3, acc=0.95)
    return {"c1": c1, "c2": c2, "c3": c3}


def _ids(items) -> list[str]:
    return [c.id for c in items]


@pytest.mark.parametrize("few", [1000, 1], ids=["ids-sorted", "newest-first"])
def test_each_condition_and_all_of_them_newest_first(repo, catalog, few, monkeypatch):
    """Both ways a search runs find the same: from the ids of a condition few commits meet,
    or (no condition is, here with a threshold of 1) newest first a window at a time, each
    commit probed."""
    monkeypatch.setattr(mint.search, "_FEW", few)
    monkeypatch.setattr(mint.search, "_WINDOW", 1)  # newest first: windows of 1, 4, 16...
    c1, c2, c3 = catalog["c1"], catalog["c2"], catalog["c3"]
    assert _ids(api.search(repo)) == [c3, c2, c1]
    assert _ids(api.search(repo, meta=["lr=0.001"])) == [c3, c1]
    assert _ids(api.search(repo, meta=["lr=0.001", "data=v1"])) == [c1]
    assert _ids(api.search(repo, meta=["epochs=3"])) == [c3]  # a number matches as its JSON
    assert _ids(api.search(repo, meta=["lr=0.1"])) == []
    assert _ids(api.search(repo, metric=["acc>=0.9"])) == [c3, c2]
    assert _ids(api.search(repo, metric=["acc>0.9"])) == [c3]
    assert _ids(api.search(repo, metric=["acc<0.7"])) == [c2]  # its second evaluation
    assert _ids(api.search(repo, metric=["acc<=0.7"])) == [c2, c1]
    assert _ids(api.search(repo, metric=["acc=0.95"])) == [c3]
    assert _ids(api.search(repo, metric=["acc > 0.5", "acc < 0.65"])) == [c2]
    # conditions on one metric hold for one evaluation: c2's 0.9 and 0.6 each miss one
    assert _ids(api.search(repo, metric=["acc>0.65", "acc<0.8"])) == [c1]
    assert _ids(api.search(repo, metric=["loss>=0"])) == []  # no evaluation has it
    assert _ids(api.search(repo, tag=["v1"])) == [c3, c1]
    assert _ids(api.search(repo, line="chat")) == [c2, c1]
    assert _ids(api.search(repo, line="team/*")) == [c3]
    assert _ids(api.search(repo, line="c?at")) == [c2, c1]
    assert _ids(api.search(repo, author="alice")) == [c3, c1]
    assert _ids(api.search(repo, author="alice", n=1)) == [c3]
    both = dict(meta=["lr=0.001"], metric=["acc>=0.5"], tag=["v1"], line="*", author="alice")
    assert _ids(api.search(repo, **both)) == [c3, c1]
    assert _ids(api.search(repo, **both | {"metric": ["acc<0.8"]})) == [c1]
    # -n: the newest that meet them (read a window at a time when nothing drives the search)
    assert _ids(api.search(repo, n=2)) == [c3, c2]
    assert _ids(api.search(repo, meta=["lr=0.001"], n=1)) == [c3]
    assert _ids(api.search(repo, metric=["acc<=0.7"], line="chat", n=1)) == [c2]
    assert _ids(api.search(repo, tag=["v1"], author="alice", n=2)) == [c3, c1]
    assert _ids(api.search(repo, line="[ct]*", n=5)) == [c3, c2, c1]


def test_the_cli_prints_as_log_does(mint, repo, catalog):
    found = ("--meta", "lr=0.001", "--metric", "acc>=0.5", "--author", "alice")
    r = mint("search", *found, "--oneline")
    assert r.code == 0, r
    log = mint("log", "--oneline").out.splitlines()
    assert r.out.splitlines() == [log[0], log[2]]  # c3 and c1, as log shows them
    blocks = mint("log").out.split("\ncommit ")  # the default: a block each, as git's log
    assert mint("search", *found).out.split("\ncommit ") == [blocks[0], blocks[2]]
    as_json = mint("search", "--tag", "v1", "-n", "1", "--json")
    assert as_json.code == 0 and as_json.json() == mint("log", "-n", "1", "--json").json()
    assert mint("search", "--line", "nowhere*").out == ""


@pytest.mark.parametrize(
    "args, expect",
    [
        (("--metric", "acc>>x"), "NAME>=X"),
        (("--metric", "acc>=x"), "'x' is not a number"),
        (("--metric", "acc>=inf"), "finite"),
        (("--metric", "acc"), "NAME>=X"),
        (("--meta", "novalue"), "KEY=VALUE"),
        (("--meta", "=v"), "KEY=VALUE"),
        (("--tag", " "), "tag"),
        (("-n", "0"), "-n"),
    ],
)
def test_bad_conditions_are_one_line(mint, repo, args, expect):
    before = snapshot(repo)
    one_line_error(mint("search", *args), expect)
    assert snapshot(repo) == before


def test_migration_0008_fills_the_index_from_stored_rows(repo, catalog):
    wanted = {q: _ids(api.search(repo, **dict([q]))) for q in _QUERIES}
    command.downgrade(alembic_config(repo.db.url), "0007")
    command.upgrade(alembic_config(repo.db.url), "head")
    with repo.db.read() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(s.commit_meta)).scalar() == 5
    assert {q: _ids(api.search(repo, **dict([q]))) for q in _QUERIES} == wanted


_QUERIES = (("meta", ("lr=0.001",)), ("metric", ("acc<0.7",)), ("metric", ("acc>0.8",)))


def test_registry_search_limited_to_the_tokens_lines(repo, catalog, monkeypatch, tmp_path):
    c1, c2, c3 = catalog["c1"], catalog["c2"], catalog["c3"]
    everyone = create_token(repo.root, "rita", "reader")
    chat_only = create_token(repo.root, "carl", "reader", ("chat",))
    with running_registry(repo.root) as registry:
        with registry.client(everyone) as http:
            found = http.get("/api/v1/search", params={"meta": "lr=0.001", "n": 5})
            assert [c["id"] for c in found.json()] == [c3, c1]
            many = [("metric", "acc>=0.5"), ("metric", "acc<0.8"), ("tag", "v1")]
            assert [c["id"] for c in http.get("/api/v1/search", params=many).json()] == [c1]
            error_of(http.get("/api/v1/search", params={"metric": "acc>>x"}), 400, "InvalidQuery")
            error_of(http.get("/api/v1/search", params={"meta": "novalue"}), 400, "InvalidQuery")
        with registry.client(chat_only) as http:
            found = http.get("/api/v1/search", params={"meta": "lr=0.001"})
            assert [c["id"] for c in found.json()] == [c1]
            found = http.get("/api/v1/search", params={"line": "team/*"})
            assert found.status_code == 200 and found.json() == []
        with registry.client(None) as http:
            error_of(http.get("/api/v1/search"), 401)

        monkeypatch.setenv("MINT_TOKEN", chat_only)
        remote = Result(*run_in_process(["--repo", registry.url, "search", "--json"]))
        assert remote.code == 0, remote
        assert [c["id"] for c in remote.json()] == [c2, c1]
        monkeypatch.setenv("MINT_TOKEN", everyone)
        found = ("search", "--tag", "v1", "--oneline")
        remote = Result(*run_in_process(["--repo", registry.url, *found]))
        local = Result(*run_in_process(["--repo", str(repo.root), *found]))
        assert remote.code == 0 and remote.out == local.out and len(local.out.splitlines()) == 2
        bad = Result(*run_in_process(["--repo", registry.url, "search", "--metric", "a>>1"]))
        one_line_error(bad, "NAME>=X")

        # a clone receives the commits and their evaluations through the import every door
        # uses (push, fetch, clone): its index finds them as the origin's does
        api.clone(registry.url, tmp_path / "clone", token=everyone, by="rita")
        cloned = api.open_repo(tmp_path / "clone")
        try:
            for query in ({"meta": ["lr=0.001"]}, {"metric": ["acc<0.7"]}, {"author": "bob"}):
                assert _ids(api.search(cloned, **query)) == _ids(api.search(repo, **query))
        finally:
            cloned.close()
