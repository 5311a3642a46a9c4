"""The tokens page: an admin lists, creates (the secret shown once) and revokes tokens in a
real browser, against a real `mint registry serve` process on SQLite and on PostgreSQL; the
results are checked through the JSON API. Posts without the session's CSRF token, and every
request of a non-admin, are refused over plain HTTP.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from mint import api

from support.browser import chromium, sign_in, wait_for
from support.pgdb import pg_database
from support.registry import Registry, create_token, start_registry

pytestmark = [
    pytest.mark.xdist_group("web-tokens"),
    pytest.mark.one_database(
        "postgresql",
        "tokens are made and revoked by the functions test_team_remote runs on both databases",
    ),
]

WHO = {"root": "admin", "maint": "maintainer", "lined": "admin"}  # lined: admin of chat* only


@dataclass
class Site:
    server: Registry
    tokens: dict[str, str]
    browser: object = None
    clients: dict = field(default_factory=dict)

    def session(self, who: str) -> httpx.Client:
        """Plain HTTP with WHO's session cookie."""
        if who not in self.clients:
            cookies = {"mint_session": self.tokens[who]}
            self.clients[who] = httpx.Client(base_url=self.server.url, cookies=cookies)
        return self.clients[who]

    def api_as(self, secret: str, path: str) -> httpx.Response:
        with self.server.client(secret) as c:
            return c.get(path)

    def listed(self) -> dict[str, dict]:
        answer = self.api_as(self.tokens["root"], "/api/v1/tokens")
        return {t["name"]: t for t in answer.json()}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def site(request, tmp_path_factory):
    with contextlib.ExitStack() as stack:
        url = None if request.param == "sqlite" else stack.enter_context(pg_database())
        folder = tmp_path_factory.mktemp(f"web-tokens-{request.param}")
        repo, _ = api.init(folder / "repo", url)
        repo.close()
        tokens = {
            name: create_token(repo.root, name, role, ("chat*",) if name == "lined" else ())
            for name, role in WHO.items()
        }
        server = start_registry(repo.root)
        stack.callback(server.stop)
        s = Site(server, tokens)
        stack.callback(lambda: [c.close() for c in s.clients.values()])
        s.browser = chromium(Path(tempfile.mkdtemp(prefix="chromium-", dir=folder)))
        stack.callback(s.browser.quit)
        yield s


def csrf_of(client: httpx.Client, path: str = "/") -> str:
    return re.search(r'name="csrf" value="([0-9a-f]+)"', client.get(path).text).group(1)


def test_an_admin_creates_a_token_sees_it_once_and_revokes_it(site):
    b = site.browser
    sign_in(b, site.server.url, site.tokens["root"])
    b.find_element("id", "tokens-link").click()
    wait_for(b, lambda: b.find_element("id", "create"))
    names = [e.text for e in b.find_elements("css selector", "#tokens td.name")]
    assert names == sorted(WHO)
    b.find_element("id", "name").send_keys("ci")
    b.find_element("css selector", "#role option[value=writer]").click()
    b.find_element("id", "lines").send_keys("chat*, eval-?")
    b.find_element("id", "make").click()
    wait_for(b, lambda: b.find_element("id", "secret").text.startswith("mint_"))
    secret = b.find_element("id", "secret").text
    made = site.listed()["ci"]
    assert made["role"] == "writer" and made["lines"] == ["chat*", "eval-?"]
    assert made["created_by"] == "root" and made["revoked_at"] is None
    assert site.api_as(secret, "/api/v1/lines").status_code == 200  # a working token
    b.get(site.server.url + "/tokens")  # shown once: never again, nor in the server's log
    assert secret not in b.page_source and b.find_elements("id", "secret") == []
    assert secret not in site.server.output()
    row = b.find_element("css selector", "#tokens tr[data-token=ci]")
    row.find_element("css selector", "a.revoke").click()  # a page that asks first
    wait_for(b, lambda: b.find_element("id", "confirm"))
    assert site.listed()["ci"]["revoked_at"] is None
    b.find_element("id", "confirm").click()
    wait_for(b, lambda: "revoked" in b.find_element("css selector", "tr[data-token=ci]").text)
    b.get(site.server.url + "/tokens/revoke?name=ci")
    assert b.find_element("id", "revoked") and b.find_elements("id", "confirm") == []
    assert site.listed()["ci"]["revoked_at"] is not None
    assert site.api_as(secret, "/api/v1/lines").status_code == 401


def test_the_page_refuses_a_taken_name_or_an_unknown_role_in_one_line(site):
    c = site.session("root")
    for form, status, words in (
        ({"name": "root", "role": "reader"}, 409, "a token named root exists"),
        ({"name": "x1", "role": "owner"}, 422, "invalid role name 'owner'"),
        ({"name": "bad name", "role": "reader"}, 422, "invalid token name 'bad name'"),
        ({"name": "x2", "role": "reader", "lines": "a@b"}, 422, "invalid line glob"),
    ):
        answer = c.post("/tokens", data={"csrf": csrf_of(c, "/tokens"), **form})
        assert answer.status_code == status
        error = re.search(r'id="error">(.*?)</p>', answer.text, re.S).group(1)
        assert "\n" not in error and words in error.replace("&#39;", "'")
        assert 'id="secret"' not in answer.text
    assert not {"x1", "bad name", "x2"} & set(site.listed())


def test_posts_without_the_sessions_csrf_token_are_refused(site):
    root = site.session("root")
    other = csrf_of(site.session("maint"))  # a real CSRF token, of another session
    for csrf in (None, "", "0" * 64, other):
        extra = {} if csrf is None else {"csrf": csrf}
        made = root.post("/tokens", data={"name": "forged", "role": "admin", **extra})
        assert made.status_code == 403 and 'id="secret"' not in made.text
        revoked = root.post("/tokens/revoke", data={"name": "maint", **extra})
        assert revoked.status_code == 403
    listed = site.listed()
    assert "forged" not in listed and listed["maint"]["revoked_at"] is None


@pytest.mark.parametrize("who", ["maint", "lined"])
def test_anyone_but_an_admin_of_the_whole_registry_gets_403(site, who):
    c = site.session(who)
    assert c.get("/tokens").status_code == 403
    assert c.get("/tokens/revoke", params={"name": "root"}).status_code == 403
    assert 'id="tokens-link"' not in c.get("/").text
    csrf = csrf_of(c)
    made = c.post("/tokens", data={"csrf": csrf, "name": f"by-{who}", "role": "reader"})
    assert made.status_code == 403
    revoked = c.post("/tokens/revoke", data={"csrf": csrf, "name": "root"})
    assert revoked.status_code == 403
    listed = site.listed()
    assert f"by-{who}" not in listed and listed["root"]["revoked_at"] is None


def test_revoking_an_unknown_token_is_a_404_in_one_line(site):
    c = site.session("root")
    assert c.get("/tokens/revoke", params={"name": "<b>nobody"}).status_code == 404
    answer = c.post("/tokens/revoke", data={"csrf": csrf_of(c), "name": "<b>nobody"})
    assert answer.status_code == 404 and "<b>nobody" not in answer.text


def test_without_a_session_the_page_sends_to_sign_in(site):
    answer = httpx.get(site.server.url + "/tokens", follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"].startswith("/signin")
    assert httpx.post(site.server.url + "/tokens", data={"name": "x"}).status_code == 403
