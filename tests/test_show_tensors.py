"""`show`'s tensor table (issue 24): a registry answers a commit with the table summarized (its
count and bytes) unless the rows are asked for (`?tensors=all`, or a page with
`tensors_offset` and `tensors_limit`); `mint show` prints the summary and says how to list
them, `--tensors` lists them, `--json` keeps every row. Through a real `mint registry serve`
on SQLite and PostgreSQL, and the real CLI on both sides."""

from __future__ import annotations

import contextlib
import json

import pytest

from mint import api
from mint.cli import run_in_process
from mint.jsonable import to_jsonable

from support.pgdb import pg_database
from support.registry import create_token, error_of, start_registry

pytestmark = [
    pytest.mark.xdist_group("registry"),
    pytest.mark.one_database(
        "sqlite",
        "the table is computed from the stored files; test_commit stores them on both databases",
    ),
]

PATH = "/api/v1/commits/chat"


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def served(request, tmp_path_factory, models):
    """(repo, registry, reader token, the commit's whole tensor table as JSON)."""
    with contextlib.ExitStack() as stack:
        url = None if request.param == "sqlite" else stack.enter_context(pg_database())
        folder = tmp_path_factory.mktemp(f"show-tensors-{request.param}")
        repo, _ = api.init(folder / "repo", url)
        stack.callback(repo.close)
        api.base_add(repo, "tiny-llama", models["base"])
        api.commit(repo, "chat", models["a1"], "first", author="alice")
        token = create_token(repo.root, "ada", "reader")
        server = start_registry(repo.root)
        stack.callback(server.stop)
        table = to_jsonable(api.show(repo, "chat").tensors)
        assert len(table) > 4  # enough rows for a page in the middle
        yield repo, server, token, table


@pytest.fixture
def client(served):
    _, server, token, _ = served
    with server.client(token) as http:
        yield http


def test_a_commit_is_answered_with_its_tensor_table_summarized(served, client):
    _, _, _, table = served
    for params in ({}, {"tensors": "summary"}):
        got = client.get(PATH, params=params)
        assert got.status_code == 200, got.text
        body = got.json()
        assert body["tensors"] == []
        assert body["tensor_count"] == len(table)
        assert body["tensor_bytes"] == sum(t["nbytes"] for t in table) > 0
        assert body["id"] == got.json()["id"] and body["files"] and body["peft"]


def test_every_tensor_on_request_and_pages_of_the_table(served, client):
    _, _, _, table = served
    whole = client.get(PATH, params={"tensors": "all"}).json()
    assert whole["tensors"] == table and whole["tensor_count"] == len(table)
    for params, want in (
        ({"tensors_offset": 1, "tensors_limit": 2}, table[1:3]),
        ({"tensors": "all", "tensors_limit": 3}, table[:3]),
        ({"tensors_offset": len(table) - 1}, table[-1:]),
        ({"tensors_offset": len(table)}, []),
        ({"tensors_offset": 10**6, "tensors_limit": 5}, []),
    ):
        body = client.get(PATH, params=params).json()
        assert body["tensors"] == want, params
        assert body["tensor_count"] == len(table), params  # the whole table's, whatever the page


@pytest.mark.parametrize(
    "params, where",
    [
        ({"tensors_offset": -1}, "tensors_offset"),
        ({"tensors_offset": "one"}, "tensors_offset"),
        ({"tensors_offset": 2**31}, "tensors_offset"),
        ({"tensors_limit": 0}, "tensors_limit"),
        ({"tensors_limit": 100_001}, "tensors_limit"),
        ({"tensors": "some"}, "tensors"),
        ({"tensors": "summary", "tensors_limit": 2}, "tensors"),
    ],
)
def test_bad_paging_is_a_422_of_one_line(client, params, where):
    got = client.get(PATH, params=params)
    error = error_of(got, 422, "InvalidRequest")
    assert error["message"].startswith(f"query.{where}:") and "\n" not in error["message"]


def test_the_cli_through_the_registry_and_locally(served, monkeypatch):
    repo, server, token, table = served
    monkeypatch.setenv("MINT_TOKEN", token)
    names = [t["name"] for t in table]
    nbytes = sum(t["nbytes"] for t in table)
    for where in (server.url, str(repo.root)):

        def mint(*args, where=where):
            return run_in_process(["--repo", where, "show", "chat", *args])

        code, out, err = mint()
        assert code == 0, err
        assert f"{len(table)} tensors, {nbytes:,} bytes" in out
        assert "mint show chat --tensors lists them" in out
        assert not any(name in out for name in names)

        code, out, err = mint("--tensors")
        assert code == 0, err
        assert all(name in out for name in names) and "--tensors lists them" not in out

        code, out, err = mint("--tensors-offset", "1", "--tensors-limit", "2")
        assert code == 0, err
        assert [n for n in names if n in out] == names[1:3]

        code, out, err = mint("--json")
        assert code == 0, err
        assert json.loads(out)["tensors"] == table  # --json keeps every row

        for bad in (("--tensors-limit", "0"), ("--tensors-offset", "-3")):
            code, out, err = mint(*bad)
            lines = [line for line in err.splitlines() if line.strip()]
            assert code == 2 and out == "" and len(lines) == 1, (bad, err)
            assert bad[0] in lines[0] and "Traceback" not in err, (bad, err)
