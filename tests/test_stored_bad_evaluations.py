"""Evaluation rows stored before the push path checked them (issue 19, item 3): a registry
that ran an older mint can hold a metric whose value is a string, null or a list, or an
unknown `source`. Every read must survive such a row: the gate (and promote) refuse with a
table naming the metric, `mint fsck` names the row, and the API and the pages answer.

The rows are inserted with SQLAlchemy straight into the `evaluations` table: that is what an
older version wrote, and no door of today's mint lets them in any more."""

from __future__ import annotations

import re

import httpx
import pytest

from mint import api
from mint import schema as s
from mint.ids import utcnow

from conftest import snapshot
from support.registry import create_token, running_registry

STAGING = """
name = "staging"
channel = "staging"
[[metric]]
name = "accuracy"
min = 0.9
[[metric]]
name = "bench"
max_regression = 0.01
"""
GOOD = {"accuracy": 0.95, "bench": 0.5}


@pytest.fixture
def line(mint, models, tmp_path):
    """Two commits on `chat` and the contract `staging`; returns (mint, [ids])."""
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    ids = [mint("commit", "chat", models[k], "-m", k, "--json").json()["id"] for k in ("a1", "a2")]
    (tmp_path / "staging.toml").write_text(STAGING)
    assert mint("contract", "add", tmp_path / "staging.toml").code == 0
    return mint, ids


def stored_row(repo, cid: str, metrics: object, source: str = "manual") -> int:
    """An evaluation row as an older mint stored it (unchecked), written behind mint's back:
    no command or route of this version stores one."""
    contract = api.contract_show(repo, "staging")
    row = dict(commit_id=cid, contract_id=contract.id, metrics=metrics, source=source)
    with repo.db.write() as conn:
        return conn.execute(
            s.evaluations.insert().values(by="old-mint", at=utcnow(), **row)
        ).inserted_primary_key[0]


def evaluate(mint, rev, **values) -> None:
    args = [x for k, v in values.items() for x in ("--metric", f"{k}={v}")]
    assert mint("eval", rev, "--contract", "staging", *args).code == 0


def no_traceback(r) -> None:
    assert "Traceback" not in r.out + r.err, r


@pytest.mark.parametrize(
    "value, shown",
    [("abc", "'abc'"), (None, "None"), ([1], "[1]"), (True, "True"), (10**400, "digits")],
    ids=["string", "null", "list", "bool", "huge-int"],
)
def test_gate_and_promote_refuse_a_stored_bad_metric_with_its_table(line, repo, value, shown):
    mint, ids = line
    eid = stored_row(repo, ids[0], {"accuracy": value, "bench": 0.5})
    before = snapshot(repo)
    for argv in (("gate", ids[0], "--to", "staging"), ("promote", ids[0], "--to", "staging")):
        r = mint(*argv)
        no_traceback(r)
        assert r.code == 3, r
        row = next(l for l in r.out.splitlines() if l.startswith("accuracy"))
        assert "not a number" in row and shown in row and "FAIL" in row, r.out
    assert snapshot(repo) == before
    gate = mint("gate", ids[0], "--to", "staging", "--json").json()
    assert gate["evaluations"] == [eid] and not gate["ok"]
    (bad,) = [c for c in gate["checks"] if not c["ok"]]
    assert bad["check"] == "accuracy" and bad["found"].startswith("not a number (stored value")

    fsck = mint("fsck")
    no_traceback(fsck)
    assert fsck.code == 1
    assert f"evaluation {eid} of {ids[0][:12]}: metric 'accuracy' is not a number" in fsck.out

    # A good evaluation recorded afterwards is the latest: the commit can be promoted again.
    evaluate(mint, ids[0], **GOOD)
    assert mint("promote", ids[0], "--to", "staging").code == 0


def test_a_holder_with_a_stored_bad_metric_fails_only_the_regression_row(line, repo):
    mint, ids = line
    evaluate(mint, ids[0], **GOOD)
    assert mint("promote", ids[0], "--to", "staging").code == 0
    stored_row(repo, ids[0], {"accuracy": 0.95, "bench": "high"})
    evaluate(mint, ids[1], **GOOD)
    r = mint("gate", ids[1], "--to", "staging", "--json")
    no_traceback(r)
    assert r.code == 3, r
    (bad,) = [c for c in r.json()["checks"] if not c["ok"]]
    assert bad["check"] == "bench (regression)" and "'high'" in bad["found"]


@pytest.mark.parametrize("source", ["legacy-import", "x" * 16])
def test_an_unknown_stored_source_is_shown_as_it_is(line, repo, source):
    mint, ids = line
    eid = stored_row(repo, ids[0], GOOD, source=source)
    (e,) = api.evaluations_of(repo, ids[0])
    assert (e.id, e.source, e.metrics) == (eid, source, GOOD)
    gate = mint("gate", ids[0], "--to", "staging", "--json")
    no_traceback(gate)
    assert gate.json()["evaluations"] == [eid]
    fsck = mint("fsck")
    assert fsck.code == 1 and f"evaluation {eid} of {ids[0][:12]}: unknown evaluation source" in (
        fsck.out
    )


def sign_in(browser: httpx.Client, token: str) -> None:
    """As a browser does: the sign-in form's CSRF value, then the token."""
    value = re.search(r'name="csrf" value="([0-9a-f]+)"', browser.get("/signin").text).group(1)
    assert browser.post("/signin", data={"token": token, "csrf": value}).status_code == 303


def test_the_api_and_the_pages_answer_over_stored_bad_rows(line, repo, db_url):
    mint, ids = line
    evaluate(mint, ids[0], **GOOD)
    assert mint("promote", ids[0], "--to", "staging").code == 0
    rows = []
    if db_url is None:  # SQLite's JSON holds NaN; PostgreSQL refuses it (not JSON)
        nan = stored_row(repo, ids[1], {"accuracy": float("nan"), "bench": float("inf")})
        rows.append((ids[1], nan, "manual"))
    # ids[1], the head, has a string metric (its latest row); the holder a later row with an
    # unknown source.
    bad = stored_row(repo, ids[1], {"accuracy": "abc", "bench": None})
    odd = stored_row(repo, ids[0], GOOD, source="legacy")
    rows += [(ids[0], odd, "legacy"), (ids[1], bad, "manual")]
    token = create_token(repo.root, "reader", "reader")
    with running_registry(repo.root) as server, server.client(token) as c:
        gate = c.get("/api/v1/gate", params={"rev": ids[1], "channel": "staging"})
        assert gate.status_code == 200, gate.text
        failing = {x["check"]: x["found"] for x in gate.json()["checks"] if not x["ok"]}
        assert set(failing) == {"accuracy", "bench (regression)"}
        assert failing["accuracy"].startswith("not a number (stored value")

        for cid, eid, source in rows:
            found = c.get("/api/v1/evaluations", params={"rev": cid})
            assert found.status_code == 200, found.text
            (e,) = [e for e in found.json() if e["id"] == eid]
            assert e["source"] == source
        shown = {e["id"]: e["metrics"] for e in c.get(f"/api/v1/evaluations?rev={ids[1]}").json()}
        assert shown[bad] == {"accuracy": "abc", "bench": None}
        if db_url is None:  # JSON has no NaN: what cannot be sent is sent as its text
            assert shown[nan] == {"accuracy": "nan", "bench": "inf"}

        channel = c.get("/api/v1/channel", params={"ref": "chat@staging"})
        assert channel.status_code == 200, channel.text
        assert not channel.json()["gate"]["ok"]

        with httpx.Client(base_url=server.url, timeout=60) as browser:
            sign_in(browser, token)
            for path in (f"/commit/{ids[1]}", f"/commit/{ids[0]}", "/channel/chat@staging"):
                page = browser.get(path)
                assert page.status_code == 200, (path, page.text[-2000:])
            assert "not a number (stored value" in browser.get("/channel/chat@staging").text
            assert "legacy" in browser.get(f"/commit/{ids[0]}").text
        assert "Traceback" not in server.output()
