"""The registry against slow clients and login CSRF: real `mint registry serve` processes,
raw sockets and httpx (issue 19, items 8 and 9).

Slow clients: a server with `--request-timeout 1 --max-connections 8` must close a
connection whose request head or body stalls (with a 408 where part of a request came) or
whose client reads none of a response, answer 503 on a connection beyond the cap, and then
serve a normal request. No timing is asserted beyond "closed eventually": every wait for the
server is bounded by WAIT seconds, far above the configured one.

Sign-in: `POST /signin` needs the CSRF value that `GET /signin` put in its form and in a
cookie of its own; without it, or with another, it is 403 and no session cookie is set.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from mint import api

from support.pgdb import pg_database
from support.registry import Registry, create_token, error_of, start_registry

pytestmark = pytest.mark.xdist_group("registry-hardening")

TIMEOUT_S = 1  # the server's --request-timeout
MAX_CONNECTIONS = 8
WAIT = 15.0  # how long a test waits for the server to close a connection
UPLOAD = bytes(range(256)) * 4096  # 1 MiB
UPLOAD_ID = hashlib.sha256(UPLOAD).hexdigest()


@pytest.fixture(scope="module")
def slow(tmp_path_factory) -> Iterator[tuple[Registry, dict[str, str], object]]:
    """A SQLite registry with a short deadline and a small cap: (server, tokens, root)."""
    repo, _ = api.init(tmp_path_factory.mktemp("slow") / "repo")
    repo.close()
    tokens = {
        "writer": create_token(repo.root, "writer", "writer"),
        "reader": create_token(repo.root, "reader", "reader"),
    }
    args = ("--request-timeout", str(TIMEOUT_S), "--max-connections", str(MAX_CONNECTIONS))
    server = start_registry(repo.root, args=args)
    try:
        yield server, tokens, repo.root
    finally:
        server.stop()


def connect(server: Registry) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=WAIT)


def read_until_closed(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection; fails if it is still open
    after WAIT seconds."""
    got, deadline = b"", time.monotonic() + WAIT
    while time.monotonic() < deadline:
        s.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            data = s.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            return got
        if not data:
            return got
        got += data
    pytest.fail(f"the server kept the connection open for {WAIT} s (got {got[:200]!r})")


def trickle(s: socket.socket, chunk: bytes, every: float = 0.25) -> bytes:
    """Send CHUNK every EVERY seconds until the server closes the connection; what it sent.
    Fails if it still reads after WAIT seconds."""
    got, deadline = b"", time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            s.sendall(chunk)
            s.settimeout(every)
            data = s.recv(65536)
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            return got
        if not data:
            return got
        got += data
    pytest.fail(f"a trickling client held its connection for {WAIT} s (got {got[:200]!r})")


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def upload_head(token: str | None, length: int = len(UPLOAD)) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"PUT /api/v1/blobs/{UPLOAD_ID} HTTP/1.1\r\nHost: test\r\n{auth}"
        f"Content-Type: application/octet-stream\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def served(server: Registry, token: str) -> httpx.Response:
    """A normal request on a new connection, retried for WAIT seconds while the server
    answers 503 (closed connections take a moment to leave its count)."""
    deadline = time.monotonic() + WAIT
    while True:
        with server.client(token) as c:
            answer = c.get("/api/v1/lines")
        if answer.status_code != 503 or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)


# --- slow clients --------------------------------------------------------------------


def test_a_stalled_request_head_is_answered_408_and_closed(slow):
    server, tokens, _ = slow
    with connect(server) as s:
        s.sendall(b"GET /api/v1/lines HTTP/1.1\r\nHost: test\r\nX-Slow: ")
        answer = read_until_closed(s)
    assert status_of(answer) == 408, answer
    assert served(server, tokens["reader"]).status_code == 200


def test_a_head_sent_a_line_at_a_time_is_still_cut_off(slow):
    """The deadline is on the whole head, not on each read: trickling does not extend it."""
    server, tokens, _ = slow
    with connect(server) as s:
        s.sendall(b"GET /api/v1/lines HTTP/1.1\r\nHost: test\r\n")
        answer = trickle(s, b"X-A: b\r\n")
    assert status_of(answer) == 408, answer
    assert served(server, tokens["reader"]).status_code == 200


def test_a_connection_that_sends_nothing_is_closed_without_an_answer(slow):
    server, _, _ = slow
    with connect(server) as s:
        assert read_until_closed(s) == b""


def test_a_stalled_upload_is_answered_408_closed_and_stores_nothing(slow):
    server, tokens, root = slow
    with connect(server) as s:
        s.sendall(upload_head(tokens["writer"]) + UPLOAD[:4096])
        answer = read_until_closed(s)
    assert status_of(answer) == 408, answer
    with server.client(tokens["writer"]) as c:
        missing = c.post("/api/v1/blobs/missing", json={"ids": [UPLOAD_ID]})
        assert missing.json()["missing"] == [UPLOAD_ID]
        # The upload's temp file is gone: a stalled client leaves nothing behind.
        assert not list((root / ".mint" / "tmp").glob("upload-*"))
        # The same upload, sent whole, is stored.
        stored = c.put(f"/api/v1/blobs/{UPLOAD_ID}", content=UPLOAD)
        assert stored.status_code == 201, stored.text


def test_a_client_that_reads_none_of_its_download_is_cut_off(slow):
    """A download whose client reads nothing for several deadlines is ended by the server
    (it would otherwise hold its connection and its task for as long as it likes)."""
    server, tokens, _ = slow
    big = hashlib.sha256(b"big").digest() * (16 * 1024 * 1024 // 32)  # 16 MiB
    big_id = hashlib.sha256(big).hexdigest()
    with server.client(tokens["writer"]) as c:
        assert c.put(f"/api/v1/blobs/{big_id}", content=big).status_code == 201
    host, port = server.url.removeprefix("http://").split(":")
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: writes stall
        s.connect((host, int(port)))
        s.sendall(
            f"GET /api/v1/blobs/{big_id} HTTP/1.1\r\nHost: test\r\n"
            f"Authorization: Bearer {tokens['reader']}\r\n\r\n".encode()
        )
        time.sleep(5 * TIMEOUT_S)  # read nothing for several deadlines
        got = read_until_closed(s)
    assert status_of(got) == 200 and len(got) < len(big), len(got)
    assert served(server, tokens["reader"]).status_code == 200


@pytest.mark.parametrize("who", ["writer", None])
def test_an_upload_trickled_below_the_minimum_rate_is_cut_off(slow, who):
    """A body's bytes must keep coming (1 KiB in each deadline's window): a few bytes now and
    then do not hold a connection, with a token (408) or without one (401 at once, then the
    connection is closed all the same)."""
    server, tokens, _ = slow
    with connect(server) as s:
        s.sendall(upload_head(tokens.get(who)) + UPLOAD[:100])
        answer = trickle(s, b"x" * 50)
    assert status_of(answer) == (408 if who else 401), answer
    assert served(server, tokens["reader"]).status_code == 200


def test_beyond_max_connections_a_request_is_answered_503(slow):
    server, tokens, _ = slow
    assert served(server, tokens["reader"]).status_code == 200
    held = [connect(server) for _ in range(MAX_CONNECTIONS)]
    try:
        for s in held:
            s.sendall(b"GET /api/v1/lines HTTP/1.1\r\nHost: test\r\n")  # unfinished
        with server.client(tokens["reader"]) as c:
            answer = c.get("/api/v1/lines")
        error = error_of(answer, 503, "ServiceUnavailable")
        assert "--max-connections 8" in error["message"]
        assert answer.headers["retry-after"] == "1"
    finally:
        for s in held:
            s.close()
    answer = served(server, tokens["reader"])
    assert answer.status_code == 200 and answer.json() == []


# --- sign-in and CSRF ------------------------------------------------------------------


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def site(request, tmp_path_factory) -> Iterator[tuple[Registry, str]]:
    """A registry on SQLite or PostgreSQL and a maintainer's token."""
    with contextlib.ExitStack() as stack:
        url = None if request.param == "sqlite" else stack.enter_context(pg_database())
        repo, _ = api.init(tmp_path_factory.mktemp(f"signin-{request.param}") / "repo", url)
        repo.close()
        token = create_token(repo.root, "maint", "maintainer")
        server = start_registry(repo.root)
        stack.callback(server.stop)
        yield server, token


def signin_form(c: httpx.Client) -> str:
    """GET /signin: the CSRF value of its form (the client keeps its cookie)."""
    page = c.get("/signin")
    assert page.status_code == 200
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert found, "the sign-in form has no CSRF field"
    assert c.cookies.get("mint_signin", path="/signin") == found.group(1)
    return found.group(1)


def test_sign_in_without_its_csrf_value_is_refused_and_sets_no_session(site):
    server, token = site
    with httpx.Client(base_url=server.url) as other:
        stranger = signin_form(other)  # a value of another browser (the attacker's own)
    with httpx.Client(base_url=server.url) as c:
        # Another site's forged form: no cookie of ours at all.
        for form in ({}, {"csrf": ""}, {"csrf": stranger}, {"csrf": "☃"}):
            answer = c.post("/signin", data={"token": token, "next": "/", **form})
            assert answer.status_code == 403, answer.text
            assert "CSRF" in answer.text and "mint_session" not in str(answer.headers)
        # The form's cookie, with a missing, empty or wrong value in the form.
        value = signin_form(c)
        for form in ({}, {"csrf": ""}, {"csrf": stranger}, {"csrf": value[:-1] + "☃"}):
            answer = c.post("/signin", data={"token": token, "next": "/", **form})
            assert answer.status_code == 403, answer.text
            assert "mint_session" not in str(answer.headers)
        assert "mint_session" not in c.cookies
        assert c.get("/", follow_redirects=False).status_code == 303  # still signed out


def test_sign_in_with_its_csrf_value_signs_in(site):
    server, token = site
    with httpx.Client(base_url=server.url) as c:
        value = signin_form(c)
        wrong = c.post("/signin", data={"token": "mint_not-a-token", "csrf": value})
        assert wrong.status_code == 401 and "unknown or revoked" in wrong.text
        answer = c.post("/signin", data={"token": token, "next": "/line/x", "csrf": value})
        assert answer.status_code == 303 and answer.headers["location"] == "/line/x"
        assert c.cookies.get("mint_session") == token
        assert "mint_signin" not in c.cookies  # used: the next sign-in gets a new value
        page = c.get("/")
        assert page.status_code == 200 and ">maint" in page.text


def test_a_form_with_too_many_fields_is_a_400_not_a_500(site):
    """More fields than any form of ours (parse_qsl's limit, 50) is refused with one line,
    on sign-in and on a signed-in form, with no traceback in the server's log."""
    server, token = site
    padding = {f"a{i}": "1" for i in range(60)}
    with httpx.Client(base_url=server.url) as c:
        value = signin_form(c)
        answer = c.post("/signin", data={**padding, "token": token, "csrf": value})
        assert answer.status_code == 400, answer.text
        assert "over 50 fields" in answer.text and "mint_session" not in c.cookies
        signed = c.post("/signin", data={"token": token, "next": "/", "csrf": value})
        assert signed.status_code == 303 and c.cookies.get("mint_session") == token
        found = re.search(r'name="csrf" value="([0-9a-f]+)"', c.get("/").text)
        assert found, "a signed-in page has no form with a CSRF field"
        out = c.post("/signout", data={**padding, "csrf": found.group(1)})
        assert out.status_code == 400 and "over 50 fields" in out.text, out.text
        assert c.get("/", follow_redirects=False).status_code == 200  # still signed in
    assert "Traceback" not in server.output()
