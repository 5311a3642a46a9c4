"""Tokens, protected channels and webhooks through a registry: `mint --repo URL registry token
create|ls|revoke`, `registry protect|unprotect|protected` and `registry webhook
add|ls|rm|deliveries` against a real `mint registry serve`, on SQLite and PostgreSQL.

With a whole-repository admin's token each answers the same `--json` as the same command run
where a twin repository is; any other token (a writer, a reader, an admin limited to lines)
gets one line and a non-zero exit (403); hostile input is a 4xx, never a 500.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from mint import api
from mint.cli import run_in_process

from conftest import Result, one_line_error
from support.pgdb import pg_database
from support.registry import Registry, create_token, error_of, start_registry

pytestmark = pytest.mark.xdist_group("team_remote")

ME = "ada"  # MINT_USER where the repositories are, and the admin token's name
TOKENS = {
    ME: ("admin", ()),
    "walt": ("writer", ()),
    "rita": ("reader", ()),
    "mara": ("maintainer", ()),
    "lim": ("admin", ("chat*",)),  # an admin limited to lines
}
HOOK_ENV = "MINT_WEBHOOK_TEST_SECRET"
REVOKED_WITHIN = 15.0  # seconds: the registry may cache a token's identity for 5 s


@dataclass
class Served:
    root: Path  # the registry's repository
    twin: Path  # a repository made the same way, where the same commands run locally
    server: Registry
    tokens: dict[str, str]
    clients: dict[str | None, httpx.Client] = field(default_factory=dict)

    def as_(self, who: str | None) -> httpx.Client:
        if who not in self.clients:
            self.clients[who] = self.server.client(self.tokens[who] if who else None)
        return self.clients[who]

    def remote(self, *args, token: str | None = ME) -> Result:
        """`mint --repo URL ARGS...` with TOKEN's secret in MINT_TOKEN."""
        with pytest.MonkeyPatch.context() as env:
            env.setenv("MINT_TOKEN", self.tokens.get(token, token or ""))
            return Result(*run_in_process(["--repo", self.server.url, *map(str, args)]))

    def local(self, *args) -> Result:
        """`mint --repo TWIN ARGS...`, where the twin repository is."""
        return Result(*run_in_process(["--repo", str(self.twin), *map(str, args)]))

    def both(self, *args) -> tuple[dict | list | None, dict | list | None]:
        """ARGS (with --json) through the registry and locally: both succeed; their JSON."""
        remote, local = self.remote(*args, "--json"), self.local(*args, "--json")
        assert remote.code == 0, remote
        assert local.code == 0, local
        return remote.json(), local.json()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def served(request, tmp_path_factory):
    with contextlib.ExitStack() as stack:
        env = stack.enter_context(pytest.MonkeyPatch.context())
        env.setenv("MINT_USER", ME)
        folder = tmp_path_factory.mktemp(f"team-{request.param}")
        roots = []
        for name in ("repo", "twin"):
            url = None if request.param == "sqlite" else stack.enter_context(pg_database())
            repo, _ = api.init(folder / name, url)
            repo.close()
            roots.append(repo.root)
        root, twin = roots
        tokens = {n: create_token(root, n, role, lines) for n, (role, lines) in TOKENS.items()}
        for n, (role, lines) in TOKENS.items():
            create_token(twin, n, role, lines)
        server = start_registry(root, env={HOOK_ENV: "s3cret"})
        stack.callback(server.stop)
        s = Served(root, twin, server, tokens)
        stack.callback(lambda: [c.close() for c in s.clients.values()])
        yield s


def same(remote, local) -> None:
    """REMOTE and LOCAL alike but for the times each was written (and a new token's secret)."""
    assert plain(remote) == plain(local)


def plain(value):
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k.endswith("_at") and v is not None:
                v = "<time>"
            elif k == "token":
                assert isinstance(v, str) and v.startswith("mint_") and len(v) > 40, v
                v = "<secret>"
            out[k] = plain(v)
        return out
    return value


def whoami(served: Served, secret: str) -> int:
    with served.server.client(secret) as client:
        return client.get("/api/v1/whoami").status_code


# --- tokens ------------------------------------------------------------------------------


def test_tokens_through_the_registry_answer_as_where_the_repository_is(served):
    made, local = served.both("registry", "token", "create", "bob", "--role", "reader")
    same(made, local)
    assert (made["name"], made["role"], made["lines"]) == ("bob", "reader", None)
    assert made["token"] not in served.server.output()  # the secret is never logged
    assert whoami(served, made["token"]) == 200

    limited, local = served.both("registry", "token", "create", "cleo", "--role", "writer",
                                 "--lines", "chat*", "--lines", "code")  # fmt: skip
    same(limited, local)
    assert limited["lines"] == ["chat*", "code"]

    listed, local = served.both("registry", "token", "ls")
    same(listed, local)
    names = [t["name"] for t in listed]
    assert {"bob", "cleo", ME, "walt"} <= set(names) and "token" not in listed[0]
    assert [t.name for t in _state(served)[0]] == names
    table = served.remote("registry", "token", "ls")
    assert table.code == 0 and "bob" in table.out and made["token"] not in table.out

    again = served.remote("registry", "token", "create", "bob", "--role", "reader")
    one_line_error(again, "a token named bob exists")
    assert again.err == served.local("registry", "token", "create", "bob", "--role", "reader").err

    revoked, local = served.both("registry", "token", "revoke", "bob")
    same(revoked, local)
    assert revoked["revoked_at"] is not None
    deadline = time.monotonic() + REVOKED_WITHIN
    while whoami(served, made["token"]) != 401:
        assert time.monotonic() < deadline, "a revoked token still answered"
        time.sleep(0.25)
    refused = served.remote("registry", "token", "ls", token=made["token"])
    one_line_error(refused, "unknown or revoked")

    gone = served.remote("registry", "token", "revoke", "nobody")
    assert one_line_error(gone, "no token named nobody") == one_line_error(
        served.local("registry", "token", "revoke", "nobody")
    )


def test_a_new_token_works_against_the_registry_with_its_role(served):
    made = served.remote("registry", "token", "create", "wendy", "--role", "writer", "--json")
    assert made.code == 0, made
    secret = made.json()["token"]
    with served.server.client(secret) as client:
        me = client.get("/api/v1/whoami").json()
        assert me == {"name": "wendy", "role": "writer", "lines": None}
        error_of(client.get("/api/v1/tokens"), 403, "Forbidden")
    tokens = _state(served)[0]
    assert next(t for t in tokens if t.name == "wendy").created_by == ME  # the token's name


# --- protected channels ------------------------------------------------------------------


def test_protection_through_the_registry_answers_as_where_the_repository_is(served):
    same(*served.both("registry", "protect", "gold", "--role", "admin"))
    same(*served.both("registry", "protect", "silver"))
    listed, local = served.both("registry", "protected")
    same(listed, local)
    assert [(p["channel"], p["role"], p["created_by"]) for p in listed] == [
        ("gold", "admin", ME),
        ("silver", "maintainer", ME),
    ]
    was, local = served.both("registry", "unprotect", "gold")
    same(was, local)
    assert was["channel"] == "gold" and was["was"]["role"] == "admin"
    same(*served.both("registry", "unprotect", "gold"))  # not protected: "was" is null
    assert [p.channel for p in _state(served)[1]] == ["silver"]

    said = served.remote("registry", "unprotect", "silver")
    assert said.code == 0 and said.out == "silver is no longer protected\n", said
    wrong = served.remote("registry", "protect", "gold", "--role", "reader")
    assert wrong.code == 2 and "reader" in wrong.err  # click's choice, before any request


# --- webhooks ----------------------------------------------------------------------------


def test_webhooks_through_the_registry_answer_as_where_the_repository_is(served):
    url = "http://127.0.0.1:9/hook"
    args = ("registry", "webhook", "add", url, "--secret-env", HOOK_ENV)
    hook, local = served.both(*args, "--events", "channel.moved,tag.moved")
    same(hook, local)
    assert (hook["url"], hook["secret_env"], hook["events"], hook["created_by"]) == (
        url,
        HOOK_ENV,
        ["channel.moved", "tag.moved"],
        ME,
    )
    assert "s3cret" not in json.dumps(hook)
    every, local = served.both(*args)
    same(every, local)
    same(*served.both("registry", "webhook", "ls"))
    same(*served.both("registry", "webhook", "deliveries"))
    same(*served.both("registry", "webhook", "deliveries", hook["id"], "--limit", "5"))
    removed, local = served.both("registry", "webhook", "rm", every["id"])
    same(removed, local)
    assert removed["removed_at"] is not None
    listed = served.remote("registry", "webhook", "ls", "--json").json()
    assert [(h["id"], h["removed_at"] is None) for h in listed] == [
        (hook["id"], True),
        (every["id"], False),
    ]
    assert [h.id for h in _state(served)[2]] == [h["id"] for h in listed]

    for command in (("rm", 999), ("deliveries", 999)):
        remote = served.remote("registry", "webhook", *command)
        line = one_line_error(remote, "no webhook with id 999")
        assert line == one_line_error(served.local("registry", "webhook", *command))


def test_through_the_registry_a_hook_signs_only_with_a_mint_webhook_variable(served):
    """The server's other variables (a database password, a cloud key) are not an admin's to
    sign with, and so to guess at from the signatures its URL receives."""
    before = served.remote("registry", "webhook", "ls", "--json").json()
    refused = served.remote(
        "registry", "webhook", "add", "http://127.0.0.1:9/x", "--secret-env", "PGPASSWORD"
    )
    one_line_error(refused, "MINT_WEBHOOK_")
    assert served.remote("registry", "webhook", "ls", "--json").json() == before


# --- who may ------------------------------------------------------------------------------

COMMANDS = [
    ("registry", "token", "create", "eve", "--role", "reader"),
    ("registry", "token", "ls"),
    ("registry", "token", "revoke", "walt"),
    ("registry", "protect", "gold"),
    ("registry", "unprotect", "gold"),
    ("registry", "protected"),
    ("registry", "webhook", "add", "http://127.0.0.1:9/h", "--secret-env", HOOK_ENV),
    ("registry", "webhook", "ls"),
    ("registry", "webhook", "rm", "1"),
    ("registry", "webhook", "deliveries"),
]
ROUTES = [
    ("POST", "/api/v1/tokens", {"name": "eve", "role": "reader"}),
    ("GET", "/api/v1/tokens", None),
    ("DELETE", "/api/v1/tokens/walt", None),
    ("POST", "/api/v1/protected", {"channel": "gold"}),
    ("GET", "/api/v1/protected", None),
    ("DELETE", "/api/v1/protected/gold", None),
    ("POST", "/api/v1/webhooks", {"url": "http://127.0.0.1:9/h", "secret_env": HOOK_ENV}),
    ("GET", "/api/v1/webhooks", None),
    ("DELETE", "/api/v1/webhooks/1", None),
    ("GET", "/api/v1/webhooks/deliveries", None),
    ("GET", "/api/v1/webhooks/1/deliveries", None),
]


@pytest.mark.parametrize("who", ["walt", "rita", "mara", "lim"])
def test_only_an_admin_of_the_whole_repository_administers_it(served, who):
    before = _state(served)
    for args in COMMANDS:
        line = one_line_error(served.remote(*args, token=who), f"{who} may not", code=1)
        assert ("limited to lines" if who == "lim" else "needs the admin role") in line
    for method, path, body in ROUTES:
        error_of(served.as_(who).request(method, path, json=body), 403, "Forbidden")
        error_of(served.as_(None).request(method, path, json=body), 401, "Unauthenticated")
    assert _state(served) == before


# --- hostile input ------------------------------------------------------------------------

HOOK = {"url": "http://h/", "secret_env": HOOK_ENV}
HOSTILE = [
    ("POST", "/api/v1/tokens", {"name": "x", "role": "root"}, 422),
    ("POST", "/api/v1/tokens", {"name": "x", "role": "admin\x00"}, 422),
    ("POST", "/api/v1/tokens", {"name": "x" * 100_000, "role": "reader"}, 422),
    ("POST", "/api/v1/tokens", {"name": "x\x00y", "role": "reader"}, 422),
    ("POST", "/api/v1/tokens", {"name": "bad name", "role": "reader"}, 422),
    ("POST", "/api/v1/tokens", {"name": "x", "role": "reader", "lines": ["a b"]}, 422),
    ("POST", "/api/v1/tokens", {"name": "x", "role": "reader", "lines": ["\ud800"]}, 422),
    ("POST", "/api/v1/tokens", {"name": "x", "role": "reader", "lines": ["c"] * 5000}, 422),
    ("POST", "/api/v1/tokens", {"name": "x", "role": "reader", "lines": "chat*"}, 422),
    ("POST", "/api/v1/tokens", {"name": "x", "role": "reader", "by": "someone"}, 422),
    ("POST", "/api/v1/tokens", {"name": 7, "role": "reader"}, 422),
    ("POST", "/api/v1/tokens", [], 422),
    ("POST", "/api/v1/tokens", {"name": "ada", "role": "admin"}, 409),  # names never reused
    ("DELETE", "/api/v1/tokens/%00", None, 422),
    ("DELETE", "/api/v1/tokens/" + "n" * 5000, None, 422),
    ("DELETE", "/api/v1/tokens/nobody", None, 404),
    ("POST", "/api/v1/protected", {"channel": "gold", "role": "reader"}, 422),
    ("POST", "/api/v1/protected", {"channel": "gold", "role": "emperor"}, 422),
    ("POST", "/api/v1/protected", {"channel": "a@b"}, 422),
    ("POST", "/api/v1/protected", {"channel": "g\x00"}, 422),
    ("POST", "/api/v1/protected", {"channel": "g" * 101}, 422),
    ("DELETE", "/api/v1/protected/%00", None, 422),
    ("DELETE", "/api/v1/protected/" + "c" * 5000, None, 422),
    ("POST", "/api/v1/webhooks", {"url": "ftp://h/x", "secret_env": HOOK_ENV}, 422),
    ("POST", "/api/v1/webhooks", {"url": "http://", "secret_env": HOOK_ENV}, 422),
    ("POST", "/api/v1/webhooks", {"url": "http://h:99999/", "secret_env": HOOK_ENV}, 422),
    ("POST", "/api/v1/webhooks", {"url": "http://h/" + "p" * 5000, "secret_env": HOOK_ENV}, 422),
    ("POST", "/api/v1/webhooks", {"url": "http://h/\x00", "secret_env": HOOK_ENV}, 422),
    ("POST", "/api/v1/webhooks", {"url": "http://h/", "secret_env": "MINT_WEBHOOK_-"}, 422),
    ("POST", "/api/v1/webhooks", {**HOOK, "events": ["x"]}, 422),
    ("POST", "/api/v1/webhooks", {**HOOK, "events": ["channel.moved"] * 500}, 422),
    ("POST", "/api/v1/webhooks", {**HOOK, "secret": "s"}, 422),  # a secret never travels
    ("POST", "/api/v1/webhooks", {**HOOK, "secret_env": "PGPASSWORD"}, 422),
    ("DELETE", "/api/v1/webhooks/abc", None, 422),
    ("DELETE", "/api/v1/webhooks/-1", None, 404),
    ("DELETE", "/api/v1/webhooks/" + "9" * 40, None, 404),
    ("GET", "/api/v1/webhooks/999/deliveries", None, 404),
    ("GET", "/api/v1/webhooks/deliveries?limit=0", None, 422),
    ("GET", "/api/v1/webhooks/deliveries?limit=" + "9" * 40, None, 422),
]  # fmt: skip


@pytest.mark.parametrize("method, path, body, status", HOSTILE, ids=lambda v: repr(v)[:40])
def test_hostile_input_is_refused_with_one_line_and_changes_nothing(
    served, method, path, body, status
):
    before = _state(served)
    content = json.dumps(body).encode() if body is not None else None  # "\ud800" escaped
    headers = {"content-type": "application/json"}
    error_of(served.as_(ME).request(method, path, content=content, headers=headers), status)
    assert served.server.alive()
    assert _state(served) == before


def test_a_body_that_is_not_json_is_a_4xx(served):
    admin = served.as_(ME)
    for content in (b"{", b"\xff\xfe", b"null", b'"x"'):
        answer = admin.post(
            "/api/v1/tokens", content=content, headers={"content-type": "application/json"}
        )
        assert 400 <= answer.status_code < 500, (content, answer.text)


def _state(served: Served) -> tuple:
    repo = api.open_repo(served.root)
    try:
        return (api.token_ls(repo), api.protected_ls(repo), api.webhook_ls(repo))
    finally:
        repo.close()
