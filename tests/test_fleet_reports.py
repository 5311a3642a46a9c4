"""What a registry takes from serving processes (issue 38), through a real `mint registry
serve` over PostgreSQL: a report is recorded and read back (`GET /api/v1/fleet`,
`/fleet/history`, `/metrics`); a report for a line the token may not read (403), naming an
unknown commit (422), malformed or oversized, or for one more instance than a token may keep
live (429), is refused with one line and stores nothing; nothing a client sends is a 500."""

from __future__ import annotations

import datetime as dt

import httpx
import pytest

from mint import api

from conftest import snapshot
from support.pgdb import pg_database
from support.registry import create_token, error_of, start_registry

BY = "ann"
BOUND = 20  # the registry's --max-instances-per-token here


@pytest.fixture(scope="module")
def world(models, tmp_path_factory):
    folder = tmp_path_factory.mktemp("reports")
    with pg_database() as url:
        repo, _ = api.init(folder / "repo", url)
        api.base_add(repo, "tiny-llama", models["base"])
        chat = [api.commit(repo, "chat", models[k], k, author=BY).id for k in ("a1", "a2")]
        other = api.commit(repo, "coding", models["a3"], "c", author=BY).id
        api.promote(repo, chat[0], "production", by=BY)
        tokens = {
            "serving": create_token(repo.root, "serving", "reader", ("chat",)),
            "spammer": create_token(repo.root, "spammer", "reader", ("chat",)),
            "outsider": create_token(repo.root, "outsider", "reader", ("other*",)),
        }
        args = ("--max-instances-per-token", str(BOUND))
        registry = start_registry(repo.root, args=args)
        try:
            yield registry, repo, tokens, chat, other
        finally:
            registry.stop()
            repo.close()


def body(instance: str, commit: str | None, **more) -> dict:
    now = dt.datetime.now(dt.UTC).isoformat()
    entry = {"name": more.pop("name", "chat@production"), "commit": commit, "since": now}
    return {
        "instance": instance,
        "engine": "embedded",
        "interval": 10,
        "started_at": now,
        "names": [entry],
    } | more


def test_a_report_is_recorded_and_read_back(world):
    registry, repo, tokens, chat, _ = world
    failure = {"commit": chat[1], "at": dt.datetime.now(dt.UTC).isoformat()}
    failure |= {"kind": "NotVerified", "reason": "it carries\nno signature"}
    report = body("r-1", chat[0])
    report["names"][0]["failure"] = failure
    with registry.client(tokens["serving"]) as client:
        assert client.post("/api/v1/fleet/report", json=report).status_code == 204
        [view] = client.get("/api/v1/fleet", params={"ref": "chat@production"}).json()
        [member] = view["members"]
        assert (member["instance"], member["commit"], member["holder"]) == ("r-1", chat[0], True)
        assert member["failure"]["reason"] == "it carries no signature"  # one line
        history = client.get("/api/v1/fleet/history", params={"ref": "chat@production"}).json()
        assert [(x["instance"], x["commit"]) for x in history] == [("r-1", chat[0])]
        metrics = client.get("/metrics")
    assert metrics.status_code == 200, metrics.text
    text = metrics.text
    gauge = f'mint_fleet_instances{{line="chat",channel="production",commit="{chat[0]}",'
    assert gauge + 'holder="true"} 1' in text, text
    assert 'mint_fleet_staging_failures_total{reason="NotVerified"} 1' in text
    with registry.client(tokens["outsider"]) as client:
        assert client.get("/api/v1/fleet").json() == []  # not its lines
        error_of(client.get("/api/v1/fleet", params={"ref": "chat@production"}), 403)
    assert httpx.get(registry.url + "/metrics").status_code == 401


def test_a_report_for_a_line_the_token_may_not_read_is_refused(world):
    registry, repo, tokens, chat, _ = world
    before = snapshot(repo)
    with registry.client(tokens["outsider"]) as client:
        r = client.post("/api/v1/fleet/report", json=body("o-1", chat[0]))
    error_of(r, 403, "Forbidden")
    with registry.client() as client:
        error_of(client.post("/api/v1/fleet/report", json=body("o-1", chat[0])), 401)
    assert snapshot(repo) == before


def test_a_report_naming_an_unknown_commit_is_refused(world):
    registry, repo, tokens, chat, other = world
    before = snapshot(repo)
    with registry.client(tokens["serving"]) as client:
        for commit in ("ab" * 32, other):  # none at all; one of another line
            r = client.post("/api/v1/fleet/report", json=body("u-1", commit))
            assert (
                "no commit of its line here" in error_of(r, 422, "UnknownServedCommit")["message"]
            )
    assert snapshot(repo) == before


def malformed(chat: list[str]) -> list:
    good = body("m-1", chat[0])
    entry = good["names"][0]
    failure = {"at": entry["since"], "kind": "E", "reason": "x"}
    return [
        [],
        "a report",
        {**good, "instance": "a b"},
        {**good, "instance": "x" * 201},
        {**good, "engine": "Embedded!"},
        {**good, "interval": 0},
        {**good, "interval": "10"},
        {**good, "started_at": "yesterday"},
        {**good, "started_at": "2026-12-03T14:00:00"},  # no zone
        {**good, "dropped": -1},
        {**good, "extra": True},
        {**good, "names": [entry, entry]},
        {**good, "names": [{**entry, "name": "chat@@production"}]},
        {**good, "names": [{**entry, "name": "../chat@production"}]},
        {**good, "names": [{**entry, "commit": "ABC"}]},
        {**good, "names": [{**entry, "since": None}]},
        {**good, "names": [{**entry, "canary": {"commit": chat[1], "fraction": 1.5}}]},
        {**good, "names": [{**entry, "failure": failure | {"reason": "x" * 501}}]},
        {**good, "names": [{**entry, "failure": failure | {"reason": "a\x00b"}}]},
        {**good, "names": [{**entry, "failure": failure | {"kind": "a b"}}]},
        {**good, "names": [entry] * 1001},
    ]  # fmt: skip


def test_a_malformed_report_is_refused_with_one_line_and_stores_nothing(world):
    registry, repo, tokens, chat, _ = world
    before = snapshot(repo)
    with registry.client(tokens["serving"]) as client:
        for bad in malformed(chat):
            r = client.post("/api/v1/fleet/report", json=bad)
            assert 400 <= r.status_code < 500, (bad if len(str(bad)) < 300 else "...", r.text)
            error_of(r, r.status_code)
        r = client.post(
            "/api/v1/fleet/report",
            content=b"{not json",
            headers={"content-type": "application/json"},
        )
        assert 400 <= r.status_code < 500, r.text
    assert snapshot(repo) == before


def test_an_oversized_report_is_refused_before_it_is_read(world):
    registry, repo, tokens, chat, _ = world
    before = snapshot(repo)
    huge = body("big", chat[0])
    huge["names"][0]["failure"] = {
        "at": huge["started_at"],
        "kind": "E",
        "reason": "x" * (2 << 20),
    }
    with registry.client(tokens["serving"]) as client:
        error_of(client.post("/api/v1/fleet/report", json=huge), 413, "PayloadTooLarge")
    assert snapshot(repo) == before


def test_ten_thousand_instance_names_from_one_token_are_bounded(world):
    """One token (a compromised reader, a crash loop naming pods anew) cannot fill the
    registry: past BOUND live instances each new name is refused (429, Retry-After), the
    instances it has keep reporting, and another token is not affected."""
    registry, repo, tokens, chat, _ = world
    codes: dict[int, int] = {}
    refused_in_a_row = 0
    with registry.client(tokens["spammer"]) as client:
        for n in range(10_000):
            r = client.post("/api/v1/fleet/report", json=body(f"pod-{n}", chat[0]))
            codes[r.status_code] = codes.get(r.status_code, 0) + 1
            if r.status_code == 429:
                error_of(r, 429, "TooManyInstances")
                assert r.headers["retry-after"]
                refused_in_a_row += 1
                if refused_in_a_row == 50:  # bounded: every new name is refused from here on
                    break
            else:
                assert r.status_code == 204, r.text
                refused_in_a_row = 0
        assert codes == {204: BOUND, 429: 50}
        before = snapshot(repo)
        again = client.post("/api/v1/fleet/report", json=body("pod-10000", chat[0]))
        error_of(again, 429)
        assert snapshot(repo) == before
        assert client.post("/api/v1/fleet/report", json=body("pod-0", chat[0])).status_code == 204
    with registry.client(tokens["serving"]) as client:
        assert client.post("/api/v1/fleet/report", json=body("r-2", chat[0])).status_code == 204
    [view] = api.fleet(repo, "chat@production")
    assert sum(m.instance.startswith("pod-") for m in view.members) == BOUND
