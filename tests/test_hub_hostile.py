"""Hostile input on the Hub routes (issue 19, item 6): any character in a repo id, revision or
path gets a typed 4xx whose `X-Error-Message` a header can carry, never a 500, from real
`mint registry serve` processes: one plain (reads need a token), one `--public-read` where
anyone may ask. The client is an unmodified `huggingface_hub` where it can send the input;
where it refuses to (its repo id check), the requests are sent by hand.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    RevisionNotFoundError,
)

from mint import api

from support.pgdb import pg_database
from support.registry import Registry, create_token, start_registry

pytestmark = [
    pytest.mark.xdist_group("registry"),
    pytest.mark.one_database(
        "postgresql",
        "hostile names are refused before any statement; test_hub_upload runs the Hub's writes"
        " on both databases",
    ),
]

SNOWMAN = "\u2603"
FOLDER = SNOWMAN * 2  # the folder of many files; a lone snowman names nothing
# Percent-encoded segments: non-Latin-1 (a snowman, an emoji outside the BMP), bytes that are
# not UTF-8, control characters (NUL, CR LF with a header after them), and a very long name.
HOSTILE = [
    "%E2%98%83",
    "caf%C3%A9",
    "%F0%9F%98%80",
    "%FF%FE",
    "%ED%A0%80",
    "%00",
    "%0D%0AX-Evil:%201",
    "%7F",
    "a" * 3000,
]
PAGE = 1000  # the tree's page size


@dataclass
class Env:
    plain: Registry
    public: Registry
    token: str
    commit: str


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def env(request, tmp_path_factory, models):
    with contextlib.ExitStack() as stack:
        url = None if request.param == "sqlite" else stack.enter_context(pg_database())
        folder = tmp_path_factory.mktemp(f"hub-hostile-{request.param}")
        repo, _ = api.init(folder / "repo", url)
        stack.callback(repo.close)
        api.base_add(repo, "tiny-llama", models["base"])
        # one folder named with a snowman, holding more files than a page of the tree
        adapter = folder / "adapter"
        shutil.copytree(models["a1"], adapter)
        (adapter / FOLDER).mkdir()
        for i in range(PAGE + 1):
            (adapter / FOLDER / f"{i:04}.txt").write_text(str(i))
        commit = api.commit(repo, "coding", adapter, "coder", author="bob").id
        api.promote(repo, commit, "production", by="admin", force=True, reason="test")
        token = create_token(repo.root, "reader", "reader")
        plain = start_registry(repo.root)
        stack.callback(plain.stop)
        public = start_registry(repo.root, args=("--public-read",))
        stack.callback(public.stop)
        yield Env(plain, public, token, commit)


def urls(segment: str) -> list[str]:
    """Every Hub route with SEGMENT as the repo id, the revision or the path."""
    return [
        f"/api/models/{segment}",
        f"/api/models/team/{segment}",
        f"/api/models/{segment}/refs",
        f"/api/models/team/{segment}/refs",
        f"/api/models/{segment}/revision/main",
        f"/api/models/coding/revision/{segment}",
        f"/api/models/coding/tree/{segment}",
        f"/api/models/coding/tree/main/{segment}",
        f"/api/models/coding/{segment}",
        f"/{segment}/resolve/main/adapter_config.json",
        f"/team/{segment}/resolve/main/adapter_config.json",
        f"/coding/resolve/{segment}/adapter_config.json",
        f"/coding/resolve/main/{segment}",
        f"/coding/resolve/main/{segment}/{segment}",
    ]


def assert_typed_refusal(answer: httpx.Response, what: str) -> None:
    """A 4xx whose headers are printable ASCII (none injected), typed for the Hub client."""
    assert 400 <= answer.status_code < 500, (what, answer.status_code, answer.text[:200])
    assert "x-evil" not in answer.headers, what
    for name, value in answer.headers.raw:
        assert all(32 <= b < 127 for b in value), (what, name, value)
    assert answer.headers.get("x-error-code") in (
        "RepoNotFound",
        "RevisionNotFound",
        "EntryNotFound",
    ), (what, answer.headers)
    assert answer.headers["x-error-message"], what


@pytest.mark.parametrize("segment", HOSTILE, ids=lambda s: s[:12])
def test_any_character_anywhere_gets_a_typed_4xx_never_a_500(env, segment):
    auth = {"Authorization": f"Bearer {env.token}"}
    for server, headers in ((env.public, {}), (env.plain, auth)):
        for path in urls(segment):
            for method in ("GET", "HEAD") if "/resolve/" in path else ("GET",):
                answer = httpx.request(method, server.url + path, headers=headers)
                assert_typed_refusal(answer, f"{method} {path[:80]}")


def test_anonymous_repo_info_of_a_snowman_says_what_was_asked(env):
    answer = httpx.get(f"{env.public.url}/api/models/%E2%98%83")
    assert_typed_refusal(answer, "snowman")
    assert answer.headers["x-error-code"] == "RepoNotFound"
    assert "\\u2603" in answer.headers["x-error-message"]  # escaped in the header
    assert SNOWMAN in answer.json()["error"]  # as sent, in the body


def test_the_hub_client_gets_typed_errors_for_non_latin1_revisions_and_paths(env, tmp_path):
    hub = HfApi(endpoint=env.public.url)
    kw = {"endpoint": env.plain.url, "token": env.token, "cache_dir": tmp_path}
    for revision in (SNOWMAN, "\U0001f600", "main\u00e9x"):
        with pytest.raises(RevisionNotFoundError):
            hf_hub_download("coding", "adapter_config.json", revision=revision, **kw)
        with pytest.raises(RevisionNotFoundError):
            hub.model_info("coding", revision=revision)
        with pytest.raises(RevisionNotFoundError):
            list(hub.list_repo_tree("coding", revision=revision))
    for name in ("\u00fcber.json", f"{SNOWMAN}.json", f"{SNOWMAN}/\U0001f600"):
        with pytest.raises(EntryNotFoundError):
            hf_hub_download("coding", name, **kw)
        assert not hub.file_exists("coding", name)
    with pytest.raises(EntryNotFoundError):
        list(hub.list_repo_tree("coding", path_in_repo=f"{SNOWMAN}x"))


def test_a_tree_page_under_a_non_ascii_folder_links_to_the_next(env, tmp_path):
    answer = httpx.get(f"{env.public.url}/api/models/coding/tree/main/%E2%98%83%E2%98%83")
    assert answer.status_code == 200 and len(answer.json()) == PAGE
    link = answer.headers["link"]
    assert "/tree/main/%E2%98%83%E2%98%83?" in link and "cursor=1000" in link
    items = list(HfApi(endpoint=env.public.url).list_repo_tree("coding", path_in_repo=FOLDER))
    assert len(items) == PAGE + 1
    assert {i.path for i in items} == {f"{FOLDER}/{i:04}.txt" for i in range(PAGE + 1)}
    served = hf_hub_download(
        "coding",
        f"{FOLDER}/0007.txt",
        endpoint=env.plain.url,
        token=env.token,
        cache_dir=tmp_path,
    )
    assert Path(served).read_text() == "7"


def test_an_entry_id_beyond_any_database_integer_is_not_a_500(env):
    """Also found while at it: `before` of a channel's history reached the query unbounded
    (SQLite: OverflowError, a 500 that dropped the connection)."""
    from mint.registry.web.session import COOKIE

    huge = str(2**70)
    with env.plain.client(env.token) as client:
        answer = client.get("/api/v1/history", params={"ref": "coding@production", "before": huge})
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["type"] == "InvalidRequest"
        for before in (None, str(2**40)):  # beyond the column's type: every entry is older
            params = {"ref": "coding@production", **({"before": before} if before else {})}
            moves = client.get("/api/v1/history", params=params).json()
            assert [m["to"] for m in moves] == [env.commit]
    with httpx.Client(base_url=env.plain.url, cookies={COOKIE: env.token}) as browser:
        for before in (huge, str(2**40)):
            page = browser.get("/channel/coding@production", params={"before": before})
            assert page.status_code == 200 and env.commit[:12] in page.text, page.text[-600:]
