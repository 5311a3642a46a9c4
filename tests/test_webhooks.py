"""Webhooks: real `mint registry serve` processes deliver ref moves to a real HTTP receiver on
127.0.0.1, on SQLite and on PostgreSQL; two replicas over one PostgreSQL database deliver each
event once. Hooks are managed through the real CLI."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from mint import api
from mint.cli import run_in_process
from mint.ids import utcnow
from mint.registry import webhooks

from conftest import Result, one_line_error, snapshot
from support.hooks import Receiver, signature_ok
from support.pgdb import pg_database
from support.registry import running_registry

ME = "tester"
SECRET_ENV = "MINT_TEST_HOOK_SECRET"
SECRET = "s3cret-for-tests"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def cli(root, *args) -> Result:
    return Result(*run_in_process(["--repo", str(root), *map(str, args)]))


def add_hook(root, url: str, *args: str) -> int:
    done = cli(root, "registry", "webhook", "add", url, *args, "--json")
    assert done.code == 0, done
    return done.json()["id"]


def deliveries(root, hook_id: int | None = None) -> list[dict]:
    done = cli(
        root, "registry", "webhook", "deliveries", *([hook_id] if hook_id else []), "--json"
    )
    assert done.code == 0, done
    return done.json()


def wait_until(condition, message: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, message
        time.sleep(0.05)
    return value


def settled(root, hook_id: int, n: int) -> list[dict] | None:
    """The hook's N deliveries once none is pending, else None."""
    found = deliveries(root, hook_id)
    if len(found) == n and all(d["status"] != "pending" for d in found):
        return found
    return None


def two_commits(repo, models) -> tuple[str, str]:
    api.base_add(repo, "tiny-llama", models["base"])
    c1 = api.commit(repo, "chat", models["a1"], "1", author=ME).id
    c2 = api.commit(repo, "chat", models["a2"], "2", author=ME).id
    return c1, c2


def test_signed_moves_reach_the_receiver_with_retries(repo, models, receiver):
    c1, c2 = two_commits(repo, models)  # moves before any hook: never delivered
    every = add_hook(repo.root, receiver.url("/all"), "--secret-env", SECRET_ENV)
    flaky = add_hook(
        repo.root, receiver.url("/flaky"), "--secret-env", SECRET_ENV, "--events", "channel.moved"
    )
    gone = add_hook(repo.root, receiver.url("/gone"), "--secret-env", SECRET_ENV)
    unset = add_hook(repo.root, receiver.url("/unset"), "--secret-env", "MINT_TEST_NO_SUCH_VAR")
    receiver.fail("/flaky", 500, 503)
    receiver.answer["/gone"] = 410
    with running_registry(repo.root, env={SECRET_ENV: SECRET}) as registry:
        api.promote(repo, c1, "production", by=ME)
        api.promote(repo, c2, "production", by=ME)
        api.tag(repo, "v1", "chat", by=ME)
        api.rollback(repo, "chat@production", by=ME)
        done = {
            every: wait_until(lambda: settled(repo.root, every, 4), "all: not delivered"),
            flaky: wait_until(lambda: settled(repo.root, flaky, 3), "flaky: not delivered"),
            gone: wait_until(lambda: settled(repo.root, gone, 4), "gone: not settled"),
            unset: wait_until(lambda: settled(repo.root, unset, 4), "unset: not settled"),
        }
        registry.stop()
        # The worker stops with the app: uvicorn finishes its shutdown, no SIGKILL needed.
        assert "Application shutdown complete" in registry.output()
        assert registry.returncode() in (0, -15), registry.output()[-2000:]
    events = [r.event for r in sorted(receiver.at("/all"), key=lambda r: r.event["id"])]
    summary = [
        (e["type"], e["data"]["action"], e["data"]["from"], e["data"]["to"]) for e in events
    ]
    assert summary == [
        ("channel.moved", "promote", None, c1),
        ("channel.moved", "promote", c1, c2),
        ("tag.moved", "create", None, c2),
        ("channel.moved", "rollback", c2, c1),
    ]
    assert all(e["data"]["line"] == "chat" and e["data"]["by"] == ME for e in events)
    assert [e["data"].get("channel") for e in events if e["type"] == "channel.moved"] == [
        "production"
    ] * 3
    assert events[2]["data"]["tag"] == "v1" and set(events[0]) == {"id", "type", "at", "data"}
    for r in receiver.at("/all"):
        assert signature_ok(r, SECRET) and not signature_ok(r, SECRET + "x")
        assert r.headers["x-mint-event"] == r.event["type"]
        assert r.headers["content-type"] == "application/json"
        assert SECRET not in r.body.decode()
    check_retries(receiver, done[flaky])
    assert {(d["status"], d["attempts"], d["response_code"]) for d in done[gone]} == {
        ("failed", 1, 410)
    }
    assert len(receiver.at("/gone")) == 4 and receiver.at("/unset") == []
    assert {d["status"] for d in done[unset]} == {"failed"}
    assert all("MINT_TEST_NO_SUCH_VAR" in d["error"] for d in done[unset])
    assert {d["status"] for d in done[every]} == {"delivered"}


def check_retries(receiver: Receiver, done: list[dict]) -> None:
    """The flaky hook: three channel moves, two 5xx answers, all delivered in the end."""
    assert {d["status"] for d in done} == {"delivered"}
    assert {d["event_type"] for d in done} == {"channel.moved"}
    assert sum(d["attempts"] for d in done) == 5 and max(d["attempts"] for d in done) > 1
    assert all(d["response_code"] == 200 and d["delivered_at"] for d in done)
    got = receiver.at("/flaky")
    assert [r.code for r in got].count(200) == 3 and len(got) == 5
    # A retry sends the same event under the same delivery id, signed the same way.
    by_event: dict[int, set] = {}
    for r in got:
        by_event.setdefault(r.event["id"], set()).add((r.headers["x-mint-delivery"], r.body))
        assert signature_ok(r, SECRET)
    assert all(len(sent) == 1 for sent in by_event.values()) and len(by_event) == 3


def test_two_replicas_deliver_each_event_once(tmp_path, models, receiver):
    with pg_database() as url:
        repo, _ = api.init(tmp_path / "repo", url)
        try:
            c1, c2 = two_commits(repo, models)
            hook = add_hook(repo.root, receiver.url("/hook"), "--secret-env", SECRET_ENV)
            receiver.fail("/hook", 500, 502, 500)
            env = {SECRET_ENV: SECRET}
            with (
                running_registry(repo.root, env=env),
                running_registry(repo.root, env=env),
            ):
                for _ in range(5):
                    api.promote(repo, c1, "production", by=ME)
                    api.promote(repo, c2, "production", by=ME)
                done = wait_until(lambda: settled(repo.root, hook, 10), "not all delivered")
        finally:
            repo.close()
    assert {d["status"] for d in done} == {"delivered"}
    ok = Counter(r.event["id"] for r in receiver.at("/hook") if r.code == 200)
    assert len(ok) == 10 and set(ok.values()) == {1}
    assert sorted(ok) == sorted(d["event_id"] for d in done)
    assert all(signature_ok(r, SECRET) for r in receiver.at("/hook"))


def test_ls_rm_and_bad_input(mint, repo, monkeypatch):
    monkeypatch.delenv(SECRET_ENV, raising=False)
    made = mint("registry", "webhook", "add", "https://example.test/h", "--secret-env", SECRET_ENV)
    assert made.code == 0 and SECRET_ENV in made.err and "webhook 1:" in made.out
    monkeypatch.setenv(SECRET_ENV, SECRET)
    made = mint(
        "registry",
        "webhook",
        "add",
        "http://127.0.0.1:9/x",
        "--secret-env",
        SECRET_ENV,
        "--events",
        "tag.moved,channel.moved",
        "--json",
    )
    assert made.code == 0 and made.err == "" and SECRET not in made.out
    assert made.json()["events"] == ["channel.moved", "tag.moved"]
    before = snapshot(repo)
    for args, expect in [
        (("add", "ftp://example.test/h", "--secret-env", SECRET_ENV), "invalid webhook url"),
        (("add", "example.test/h", "--secret-env", SECRET_ENV), "invalid webhook url"),
        (("add", "http:///nohost", "--secret-env", SECRET_ENV), "invalid webhook url"),
        (("add", "http://h:99999/", "--secret-env", SECRET_ENV), "invalid webhook url"),
        (("add", "http://h/", "--secret-env", "1BAD"), "environment variable"),
        (("add", "http://h/", "--secret-env", "A-B"), "environment variable"),
        (("add", "http://h/", "--secret-env", SECRET_ENV, "--events", "x.y"), "event type"),
        (("rm", "99"), "no webhook with id 99"),
        (("deliveries", "99"), "no webhook with id 99"),
        (("rm", "abc"), None),
    ]:
        one_line_error(mint("registry", "webhook", *args), expect)
    assert snapshot(repo) == before
    hooks = mint("registry", "webhook", "ls", "--json").json()
    assert [(h["id"], h["secret_env"], h["removed_at"]) for h in hooks] == [
        (1, SECRET_ENV, None),
        (2, SECRET_ENV, None),
    ]
    assert SECRET not in json.dumps(hooks)
    assert mint("registry", "webhook", "rm", "1").code == 0
    listed = mint("registry", "webhook", "ls")
    assert "removed" in listed.out and "example.test" in listed.out
    assert [h.removed_at is not None for h in api.webhook_ls(repo)] == [True, False]
    assert mint("registry", "webhook", "deliveries", "--json").json() == []


def test_a_removed_hook_gets_nothing_and_its_pending_deliveries_fail(repo, models, receiver):
    c1, _ = two_commits(repo, models)
    hook = api.webhook_add(repo, receiver.url("/h"), SECRET_ENV, by=ME)
    api.promote(repo, c1, "production", by=ME)
    assert webhooks.fan_out(repo) == 1 and webhooks.fan_out(repo) == 0
    assert [d.status for d in api.webhook_deliveries(repo, hook.id)] == ["pending"]
    api.webhook_rm(repo, hook.id)
    assert [d.status for d in api.webhook_deliveries(repo)] == ["failed"]
    assert webhooks.claim(repo) is None and receiver.requests == []


def test_the_cursor_waits_at_a_fresh_gap():
    now = utcnow()
    rows = [SimpleNamespace(id=i, at=now) for i in (5, 6, 8, 9)]
    assert [r.id for r in webhooks.settled(rows, 4)] == [5, 6]
    assert webhooks.settled(rows, 3) == []
    old = [SimpleNamespace(id=i, at=now.replace(year=now.year - 1)) for i in (5, 7)]
    assert [r.id for r in webhooks.settled(old, 3)] == [5, 7]


def test_a_receiver_that_is_down_is_retried_later_and_a_lease_is_held(repo, models, monkeypatch):
    import httpx

    from support import free_port

    c1, _ = two_commits(repo, models)
    hook = api.webhook_add(repo, f"http://127.0.0.1:{free_port()}/down", SECRET_ENV, by=ME)
    api.promote(repo, c1, "production", by=ME)
    webhooks.fan_out(repo)
    delivery, _, lease = webhooks.claim(repo)
    assert webhooks.claim(repo) is None  # leased: no other worker takes it
    webhooks.record(repo, delivery, lease, webhooks.Outcome(503, "answered 503", retry=True))
    assert webhooks.claim(repo) is None  # not due before its backoff
    (after,) = api.webhook_deliveries(repo, hook.id)
    assert (after.status, after.attempts, after.response_code) == ("pending", 1, 503)
    assert after.next_at is not None
    monkeypatch.delenv(SECRET_ENV, raising=False)
    with httpx.Client(timeout=2) as client:
        unset = webhooks.attempt(client, delivery, hook, repo)
        monkeypatch.setenv(SECRET_ENV, SECRET)
        down = webhooks.attempt(client, delivery, hook, repo)
    assert not unset.retry and SECRET_ENV in unset.error and unset.code is None
    assert down.retry and down.code is None and "ConnectError" in down.error
