"""Line limits hold through sets (issue 19, item 2), against real `mint registry serve`
processes: a token limited to `coding*` reads a set only if it may read every member's line.

The registry holds line `secret`, line `coding`, line `codex` (outside `coding*`, before it
by name), the set `coding-evil` whose `coding` expert is `secret`'s commit (what a writer
limited to `coding*` could push before the push side refused it; here it is made locally,
before the servers start), and the set `coding-set` whose members are all on `coding`. On
PostgreSQL two replicas answer, and each read goes to both.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import GatedRepoError, HfHubHTTPError

from mint import api
from mint import errors as e
from mint.cli import run_in_process
from mint.remote.repo import RemoteRepo

from support.pgdb import pg_database
from support.registry import Registry, create_token, error_of, start_registry

pytestmark = pytest.mark.xdist_group("registry")

WEIGHTS = "adapter_model.safetensors"


def mol(name: str, coding: str) -> str:
    """A set on line NAME whose router, chat expert and summary are `coding`, and whose
    coding expert is CODING."""
    return f"""
name = "{name}"
protocol = "mol/1"
base = "tiny-llama"
[router]
adapter = "coding"
labels = ["chat", "coding"]
prompt = "route.md"
default = "chat"
[experts]
chat = "coding"
coding = "{coding}"
[summary]
adapter = "coding"
prompt = "summary.md"
"""


@dataclass
class Env:
    root: Path
    servers: list[Registry]  # one on SQLite, two replicas on PostgreSQL
    ids: dict[str, str]
    tokens: dict[str, str]  # limited: reader on coding*; writer: writer on coding*; full: reader
    secret_weights: bytes


def make_set(repo, folder: Path, name: str, coding: str) -> str:
    (folder / name).mkdir()
    (folder / name / "mol.toml").write_text(mol(name, coding))
    (folder / name / "route.md").write_text("Route the request to one expert.\n")
    (folder / name / "summary.md").write_text("Summarise the turn.\n")
    return api.set_commit(repo, folder / name / "mol.toml", name, author="carol").id


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def env(request, tmp_path_factory, models):
    with contextlib.ExitStack() as stack:
        url = None if request.param == "sqlite" else stack.enter_context(pg_database())
        folder = tmp_path_factory.mktemp(f"set-limits-{request.param}")
        repo, _ = api.init(folder / "repo", url)
        stack.callback(repo.close)
        api.base_add(repo, "tiny-llama", models["base"])
        ids = {
            "secret": api.commit(repo, "secret", models["a1"], "secret", author="sam").id,
            "coding": api.commit(repo, "coding", models["a3"], "coder", author="bob").id,
            # before the token's lines in name order, and outside them
            "codex": api.commit(repo, "codex", models["a2"], "codex", author="sam").id,
        }
        ids["evil"] = make_set(repo, folder, "coding-evil", "secret")
        ids["good"] = make_set(repo, folder, "coding-set", "coding")
        tokens = {
            "limited": create_token(repo.root, "limited", "reader", ("coding*",)),
            "writer": create_token(repo.root, "writer", "writer", ("coding*",)),
            "full": create_token(repo.root, "full", "reader"),
        }
        n = 1 if request.param == "sqlite" else 2
        servers = [start_registry(repo.root) for _ in range(n)]
        for server in servers:
            stack.callback(server.stop)
        weights = (models["a1"] / WEIGHTS).read_bytes()
        yield Env(repo.root, servers, ids, tokens, weights)


def get(server: Registry, token: str, path: str, **kw) -> httpx.Response:
    with server.client(token) as client:
        return client.get(path, **kw)


def lines_of(answer: httpx.Response) -> set[str]:
    assert answer.status_code == 200, answer.text
    return {c["line"] for c in answer.json()["commits"]}


def test_a_limited_reader_cannot_list_the_members_of_a_set_beyond_its_lines(env):
    path = "/api/v1/lines/coding-evil/objects"
    for server in env.servers:
        for who in ("limited", "writer"):
            error_of(get(server, env.tokens[who], path), 403, "Forbidden")
        # what the client already has changes nothing: the set still points at `secret`
        have = {"have": [env.ids["secret"]]}
        error_of(get(server, env.tokens["limited"], path, params=have), 403, "Forbidden")
        assert lines_of(get(server, env.tokens["full"], path)) == {
            "coding",
            "coding-evil",
            "secret",
        }
        good = get(server, env.tokens["limited"], "/api/v1/lines/coding-set/objects")
        assert lines_of(good) == {"coding", "coding-set"}


def test_a_limited_token_gets_full_pages_of_its_own_lines(env, monkeypatch):
    """GET /status and /lines in pages, and the CLI's `status --limit`: a token limited to
    `coding*` gets pages filled with its lines. `codex` (before them by name) and `secret`
    (after them) are not shown and do not shorten a page, so paging one line at a time
    walks through every one of its lines, as a full token walks through all."""
    mine = ["coding", "coding-evil", "coding-set"]
    for server in env.servers:
        for path in ("/api/v1/status", "/api/v1/lines"):
            everything = get(server, env.tokens["full"], path).json()
            assert [x["name"] for x in everything] == ["codex", *mine, "secret"]
            for who in ("limited", "writer"):
                token = env.tokens[who]
                whole = get(server, token, path).json()
                assert whole == [x for x in everything if x["name"] in mine]
                walked, after = [], None
                for _ in range(len(everything) + 1):
                    params = {"limit": 1} | ({"after": after} if after else {})
                    page = get(server, token, path, params=params).json()
                    if not page:
                        break
                    assert len(page) == 1
                    walked, after = walked + page, page[-1]["name"]
                assert walked == whole
                two = get(server, token, path, params={"limit": 2, "after": "codex"}).json()
                assert [x["name"] for x in two] == mine[:2]
                past = {"limit": 5, "after": "coding-set"}
                assert get(server, token, path, params=past).json() == []
        monkeypatch.setenv("MINT_TOKEN", env.tokens["limited"])
        code, out, err = run_in_process(["--repo", server.url, "status", "--limit", "1", "--json"])
        assert code == 0, err
        assert [x["name"] for x in json.loads(out)] == ["coding"]


def test_the_hub_refuses_a_limited_token_every_read_of_such_a_set(env, tmp_path):
    weights = f"coding/{WEIGHTS}"
    for i, server in enumerate(env.servers):
        full = {"endpoint": server.url, "token": env.tokens["full"]}
        got = hf_hub_download("coding-evil", weights, cache_dir=tmp_path / f"f{i}", **full)
        assert Path(got).read_bytes() == env.secret_weights  # the leak a limit must close
        _hub_api_refuses(HfApi(endpoint=server.url, token=env.tokens["writer"]), env)
        kw = {"endpoint": server.url, "token": env.tokens["writer"]}
        # typed (X-Error-Code GatedRepo), so the client says why, not "check your connection"
        with pytest.raises(GatedRepoError, match="outside the token's lines"):
            hf_hub_download("coding-evil", weights, cache_dir=tmp_path / f"w{i}", **kw)
        with pytest.raises(GatedRepoError, match="outside the token's lines"):
            snapshot_download("coding-evil", cache_dir=tmp_path / f"s{i}", **kw)
        assert not any(p.read_bytes() == env.secret_weights for p in _files(tmp_path, i))
        auth = {"Authorization": f"Bearer {env.tokens['limited']}"}
        for method in ("HEAD", "GET"):
            for rev in ("main", env.ids["evil"][:40]):
                url = f"{server.url}/coding-evil/resolve/{rev}/{weights}"
                answer = httpx.request(method, url, headers=auth)
                assert answer.status_code == 403, (method, rev, answer.status_code)
                assert env.secret_weights not in answer.content
        # a set whose members are all on the token's lines downloads as before
        mine = snapshot_download("coding-set", cache_dir=tmp_path / f"g{i}", **kw)
        assert (Path(mine) / "coding" / WEIGHTS).read_bytes() != env.secret_weights


def _hub_api_refuses(hub: HfApi, env: Env) -> None:
    for call in (
        lambda: hub.model_info("coding-evil"),
        lambda: hub.model_info("coding-evil", revision=env.ids["evil"][:40]),
        lambda: list(hub.list_repo_tree("coding-evil", recursive=True)),
        lambda: hub.list_repo_refs("coding-evil"),
    ):
        with pytest.raises(HfHubHTTPError) as refused:
            call()
        assert refused.value.response.status_code == 403


def _files(tmp_path: Path, i: int) -> list[Path]:
    return [
        p
        for d in (tmp_path / f"w{i}", tmp_path / f"s{i}")
        if d.exists()
        for p in d.rglob("*")
        if p.is_file()
    ]


def test_api_reads_checkout_and_serving_of_such_a_set_are_refused(env, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for i, server in enumerate(env.servers):
        limited = env.tokens["limited"]
        for path, params in (
            ("/api/v1/commits/coding-evil", None),
            (f"/api/v1/commits/{env.ids['evil']}", None),
            ("/api/v1/resolve", {"rev": "coding-evil"}),
            ("/api/v1/evaluations", {"rev": "coding-evil"}),
        ):
            error_of(get(server, limited, path, params=params), 403, "Forbidden")
        assert get(server, env.tokens["full"], "/api/v1/commits/coding-evil").status_code == 200
        assert get(server, limited, "/api/v1/commits/coding-set").status_code == 200
        # what `mint serve` following the registry loads a set with
        following = RemoteRepo(server.url, limited, cache=tmp_path / f"cache{i}")
        with pytest.raises(e.Forbidden):
            api.set_spec(following, "coding-evil")
        spec = api.set_spec(following, "coding-set")
        assert spec.id == env.ids["good"]
        # the CLI's checkout through the registry: one line, nothing written
        monkeypatch.setenv("MINT_TOKEN", limited)
        dest = tmp_path / f"checkout{i}"
        code, out, err = run_in_process(
            ["--repo", server.url, "checkout", "coding-evil", str(dest)]
        )
        assert code != 0 and "may not" in err and len(err.strip().splitlines()) == 1, err
        assert not dest.exists() or not any(dest.rglob("*"))


@pytest.mark.parametrize("step", [1, 2, 3, 500])
def test_a_limited_page_is_filled_from_as_many_catalog_pages_as_it_takes(monkeypatch, step):
    """`visible_page` with catalog pages of STEP lines: hidden lines before, between and
    after the token's own never shorten its page, and it stops at the catalog's end."""
    from mint.registry import auth
    from mint.team.tokens import Access, Identity

    catalog = ["a", "b-1", "c", "b-2", "d", "e", "b-3", "f", "g", "h"]
    catalog.sort()
    reads = []

    def read(limit, after):
        reads.append((limit, after))
        rest = [n for n in catalog if after is None or n > after]
        return rest if limit is None else rest[:limit]

    monkeypatch.setattr(auth, "FILL_STEP", step)
    who = Identity("limited", Access.READER, ["b-*"])
    name = lambda n: n  # noqa: E731
    assert auth.visible_page(who, read, None, None, name) == ["b-1", "b-2", "b-3"]
    assert auth.visible_page(who, read, 2, None, name) == ["b-1", "b-2"]
    assert auth.visible_page(who, read, 2, "b-2", name) == ["b-3"]
    assert auth.visible_page(who, read, 1, "b-3", name) == []
    reads.clear()
    assert auth.visible_page(who, read, 1, "b-1", name) == ["b-2"]
    assert all(limit == max(1, step) for limit, _ in reads)
    everyone = Identity("full", Access.READER, None)
    assert auth.visible_page(everyone, read, 3, "b-3", name) == ["c", "d", "e"]
