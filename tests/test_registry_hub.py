"""The Hub's download protocol on a registry: an unmodified `huggingface_hub` client (and PEFT,
and `mint pull`) downloads lines as model repos from real `mint registry serve` processes.

One repository per database (SQLite and PostgreSQL) with two servers: one plain (reads need a
reader token), one started with `--hf-main production --public-read`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from huggingface_hub import (
    HfApi,
    hf_hub_download,
    snapshot_download,
)
from huggingface_hub.errors import (
    EntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from mint import api
from mint.cli import run_in_process

from support.databases import REVISIONS_ON_POSTGRESQL
from support.pgdb import pg_database
from support.registry import Registry, create_token, start_registry
from support.texts import TEAM_MACARON

pytestmark = [pytest.mark.xdist_group("registry"), REVISIONS_ON_POSTGRESQL]


@dataclass
class Hub:
    root: Path
    repo: object
    plain: Registry  # reads need a reader token
    open_: Registry  # --hf-main production --public-read
    token: str
    ids: dict[str, str]
    folder: Path

    def api(self, server: Registry | None = None) -> HfApi:
        return HfApi(endpoint=(server or self.plain).url, token=self.token)

    def kw(self, tmp: Path, server: Registry | None = None) -> dict:
        """Keyword arguments of a download: the server, the token and a fresh cache."""
        return {"endpoint": (server or self.plain).url, "token": self.token, "cache_dir": tmp}


def cli(root: Path, *args: str) -> tuple[int, str, str]:
    return run_in_process(["--repo", str(root), *map(str, args)])


def variant(adapter: Path, dest: Path, tag: str) -> Path:
    """A copy of ADAPTER whose config differs (so a commit of it is a new commit)."""
    shutil.copytree(adapter, dest)
    config = json.loads((dest / "adapter_config.json").read_text())
    config["revision"] = tag
    (dest / "adapter_config.json").write_text(json.dumps(config))
    return dest


def force(repo, rev: str, channel: str) -> None:
    api.promote(repo, rev, channel, by="admin", force=True, reason="test")


def _lines(repo, folder: Path, models: dict) -> dict[str, str]:
    """team/chat: c1, c2 (production: c1 then c2), c3 (the head), tag v1 on c1; roll: r1, r2
    (production: r1 then r2); router, coding, and the set team/macaron at production."""
    ids = {
        "c1": api.commit(repo, "team/chat", models["a1"], "one", author="alice").id,
        "c2": api.commit(repo, "team/chat", models["a2"], "two", author="alice").id,
        "c3": api.commit(
            repo, "team/chat", variant(models["a1"], folder / "v3", "3"), "3", author="alice"
        ).id,
        "r1": api.commit(repo, "roll", models["a1"], "r1", author="bob").id,
        "r2": api.commit(repo, "roll", models["a2"], "r2", author="bob").id,
    }
    api.tag(repo, "team/chat@v1", ids["c1"], by="alice")
    for rev in ("c1", "c2", "r1", "r2"):
        force(repo, ids[rev], "production")
    api.commit(repo, "router", models["a1"], "router", author="bob")
    api.tag(repo, "router@v1", "router", by="bob")
    api.commit(repo, "coding", models["a3"], "coder", author="bob")
    (folder / "macaron").mkdir()
    (folder / "macaron" / "mol.toml").write_text(TEAM_MACARON)
    (folder / "macaron" / "route.md").write_text("Route the request to one expert.\n")
    (folder / "macaron" / "summary.md").write_text("Summarise the turn.\n")
    ids["set"] = api.set_commit(
        repo, folder / "macaron" / "mol.toml", "the set", author="carol"
    ).id
    force(repo, ids["set"], "production")
    return ids


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def hub(request, tmp_path_factory, models):
    with contextlib.ExitStack() as stack:
        url = None if request.param == "sqlite" else stack.enter_context(pg_database())
        folder = tmp_path_factory.mktemp(f"hub-{request.param}")
        repo, _ = api.init(folder / "repo", url)
        stack.callback(repo.close)
        api.base_add(repo, "tiny-llama", models["base"])
        ids = _lines(repo, folder, models)
        token = create_token(repo.root, "reader", "reader")
        plain = start_registry(repo.root)
        stack.callback(plain.stop)
        open_ = start_registry(repo.root, args=("--hf-main", "production", "--public-read"))
        stack.callback(open_.stop)
        yield Hub(repo.root, repo, plain, open_, token, ids, folder)


def files_of(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def checkout(hub: Hub, rev: str, tmp: Path) -> Path:
    dest = tmp / f"checkout-{rev.replace('/', '_').replace('@', '_')}"
    api.checkout(hub.repo, rev, dest)
    return dest


# --- the client's downloads ---------------------------------------------------------------


@pytest.mark.parametrize("rev", ["production", "v1", "c2"])
def test_snapshot_and_file_downloads_at_a_channel_a_tag_and_a_commit(hub, tmp_path, rev):
    commit = {"production": hub.ids["c2"], "v1": hub.ids["c1"], "c2": hub.ids["c2"]}[rev]
    revision = commit[:40] if rev == "c2" else rev
    local = files_of(checkout(hub, commit, tmp_path))
    got = snapshot_download("team/chat", revision=revision, **hub.kw(tmp_path / "a"))
    assert Path(got).name == commit[:40]
    assert files_of(Path(got)) == local
    one = hf_hub_download(
        "team/chat", "adapter_config.json", revision=revision, **hub.kw(tmp_path / "b")
    )
    assert Path(one).read_bytes() == local["adapter_config.json"]
    info = hub.api().model_info("team/chat", revision=revision, files_metadata=True)
    assert info.id == "team/chat" and info.sha == commit[:40]
    sizes = {s.rfilename: (s.size, s.lfs.sha256 if s.lfs else None) for s in info.siblings}
    assert sizes.keys() == local.keys()
    assert sizes["adapter_config.json"][0] == len(local["adapter_config.json"])
    assert hub.api().file_exists("team/chat", "adapter_model.safetensors", revision=revision)
    assert not hub.api().file_exists("team/chat", "adapter_model.bin", revision=revision)


def test_refs_tree_and_main(hub, tmp_path):
    refs = hub.api().list_repo_refs("team/chat")
    branches = {b.name: b.target_commit for b in refs.branches}
    assert branches == {"main": hub.ids["c3"][:40], "production": hub.ids["c2"][:40]}
    assert {t.name: t.target_commit for t in refs.tags} == {"v1": hub.ids["c1"][:40]}
    assert hub.api().model_info("team/chat").sha == hub.ids["c3"][:40]
    tree = hub.api().list_repo_tree("team/chat", revision="v1", recursive=True)
    assert {t.path for t in tree} == set(files_of(checkout(hub, hub.ids["c1"], tmp_path)))
    opened = hub.api(hub.open_)
    assert opened.model_info("team/chat").sha == hub.ids["c2"][:40]
    assert {b.name: b.target_commit for b in opened.list_repo_refs("team/chat").branches}[
        "main"
    ] == hub.ids["c2"][:40]


def test_unknown_repo_revision_and_file_are_typed_errors(hub, tmp_path):
    kw = hub.kw(tmp_path)
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("team/nope", "adapter_config.json", **kw)
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download("team/chat", "adapter_config.json", revision="nope", **kw)
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download("team/chat", "adapter_config.json", revision="f" * 40, **kw)
    with pytest.raises(RevisionNotFoundError):
        hub.api().model_info("team/chat", revision="refs/pr/1")
    with pytest.raises(EntryNotFoundError):
        hf_hub_download("team/chat", "nope.json", revision="production", **kw)
    assert not hub.api().file_exists("team/chat", "nope.json")
    assert not hub.api().repo_exists("team/nope")
    with pytest.raises(RepositoryNotFoundError):
        hub.api().model_info("nope")
    answer = httpx.head(
        f"{hub.plain.url}/team/chat/resolve/production/nope.json",
        headers={"Authorization": f"Bearer {hub.token}"},
    )
    assert answer.status_code == 404 and answer.headers["x-error-code"] == "EntryNotFound"
    assert answer.headers["x-repo-commit"] == hub.ids["c2"][:40]


def test_reads_need_a_reader_token_unless_public(hub, tmp_path):
    url = f"{hub.plain.url}/team/chat/resolve/production/adapter_config.json"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer mint_wrong"}).status_code == 401
    answer = httpx.get(f"{hub.open_.url}/team/chat/resolve/production/adapter_config.json")
    assert answer.status_code == 200
    for header in answer.headers:
        assert "xet" not in header.lower()
    assert answer.headers["x-repo-commit"] == hub.ids["c2"][:40]
    assert answer.headers["x-linked-etag"].strip('"') == answer.headers["etag"].strip('"')
    rolling = create_token(hub.root, f"roll-{tmp_path.name}", "reader", ("roll",))
    assert HfApi(endpoint=hub.plain.url, token=rolling).model_info("roll").id == "roll"
    assert httpx.get(url, headers={"Authorization": f"Bearer {rolling}"}).status_code == 403


def test_headers_ranges_and_quoted_revisions(hub):
    auth = {"Authorization": f"Bearer {hub.token}"}
    url = f"{hub.plain.url}/team/chat/resolve/v1/adapter_model.safetensors"
    head = httpx.head(url, headers=auth)
    size = int(head.headers["x-linked-size"])
    assert int(head.headers["content-length"]) == size
    whole = httpx.get(url, headers=auth).content
    assert len(whole) == size
    import hashlib

    assert head.headers["etag"] == f'"{hashlib.sha256(whole).hexdigest()}"'
    part = httpx.get(url, headers={**auth, "Range": "bytes=10-"})
    assert part.status_code == 206 and part.content == whole[10:]
    assert part.headers["content-range"] == f"bytes 10-{size - 1}/{size}"
    quoted = httpx.get(
        f"{hub.plain.url}/api/models/team/chat/revision/refs%2Fheads%2Fv1", headers=auth
    )
    assert quoted.status_code == 404
    assert quoted.headers["x-error-code"] == "RevisionNotFound"


# --- --hf-main, PEFT and mint pull ----------------------------------------------------------


def test_hf_main_follows_the_channel_through_a_rollback(hub, tmp_path):
    got = snapshot_download("roll", **hub.kw(tmp_path / "a", hub.open_))
    assert Path(got).name == hub.ids["r2"][:40]
    assert files_of(Path(got)) == files_of(checkout(hub, hub.ids["r2"], tmp_path))
    code, _, err = cli(hub.root, "rollback", "roll@production", "--reason", "bad")
    assert code == 0, err
    again = snapshot_download("roll", **hub.kw(tmp_path / "b", hub.open_))
    assert Path(again).name == hub.ids["r1"][:40]
    assert files_of(Path(again)) == files_of(checkout(hub, hub.ids["r1"], tmp_path))


PEFT_SCRIPT = """
import sys, torch
from peft import PeftModel
from mint.examples.tiny import load_base
base_dir, line, local = sys.argv[1:4]
ids = torch.tensor([[1, 5, 9, 3, 7, 2]])
def logits(source, **kw):
    model, _ = load_base(base_dir)
    peft = PeftModel.from_pretrained(model, source, **kw).eval()
    with torch.no_grad():
        return peft(input_ids=ids).logits
hub = logits(line, revision="production")
print("EQUAL" if torch.equal(hub, logits(local)) else "DIFFERENT")
"""


def test_peft_loads_a_line_at_a_channel_with_hf_endpoint(hub, models, tmp_path):
    local = checkout(hub, "team/chat@production", tmp_path)
    env = {
        **os.environ,
        "HF_ENDPOINT": hub.plain.url,
        "HF_TOKEN": hub.token,
        "HF_HOME": str(tmp_path / "hf"),
    }
    argv = [sys.executable, "-c", PEFT_SCRIPT, str(models["base"]), "team/chat", str(local)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "EQUAL"


def test_a_second_repository_pulls_a_set_line_as_a_set(hub, models, tmp_path, monkeypatch):
    other, _ = api.init(tmp_path / "other")
    api.base_add(other, "tiny-llama", models["base"])
    monkeypatch.setenv("HF_ENDPOINT", hub.plain.url)
    monkeypatch.setenv("HF_TOKEN", hub.token)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    code, out, err = cli(other.root, "pull", "hf://team/macaron@production", "--json")
    assert code == 0, err
    detail = api.show(other, "macaron")
    assert detail.kind == "set"
    assert detail.provenance["sha"] == hub.ids["set"][:40]
    assert detail.provenance["repo"] == "team/macaron"
    mine = files_of(checkout(hub, hub.ids["set"], tmp_path))
    api.checkout(other, "macaron", tmp_path / "pulled")
    pulled = files_of(tmp_path / "pulled")
    assert pulled.keys() == mine.keys()
    assert {k: v for k, v in pulled.items() if k != "mol.toml"} == {
        k: v for k, v in mine.items() if k != "mol.toml"
    }
    other.close()


def test_a_set_line_is_its_checkout_and_namespaced_lines_work_on_the_api(hub, tmp_path):
    mine = files_of(checkout(hub, hub.ids["set"], tmp_path))
    got = snapshot_download("team/macaron", revision="production", **hub.kw(tmp_path / "a"))
    assert files_of(Path(got)) == mine
    chat = hub.api().list_repo_tree("team/macaron", path_in_repo="chat", revision="production")
    assert sorted(t.path for t in chat) == sorted(p for p in mine if p.startswith("chat/"))
    top = {t.path for t in hub.api().list_repo_tree("team/macaron", revision="production")}
    assert {"mol.toml", "chat", "router", "summary"} <= top
    v1 = hub.plain.client(hub.token)
    assert v1.get("/api/v1/commits/team%2Fchat%40v1").json()["id"] == hub.ids["c1"]
    objects = v1.get("/api/v1/lines/team%2Fchat/objects")
    assert objects.status_code == 200 and objects.json()["head"] == hub.ids["c3"]
    v1.close()


def test_the_tree_is_paged_with_a_link_header(hub, monkeypatch):
    from fastapi.testclient import TestClient

    from mint.registry import routes_hf
    from mint.registry.app import create_app

    monkeypatch.setattr(routes_hf, "PAGE", 3)
    auth = {"Authorization": f"Bearer {hub.token}"}
    with TestClient(create_app(hub.repo)) as client:
        url, pages, seen = "/api/models/team/macaron/tree/production?recursive=true", 0, []
        while url:
            answer = client.get(url, headers=auth)
            assert answer.status_code == 200 and len(answer.json()) <= 3
            seen += [item["path"] for item in answer.json()]
            url, pages = answer.links.get("next", {}).get("url"), pages + 1
    assert pages > 2 and len(seen) == len(set(seen))
    files = hub.api().list_repo_tree("team/macaron", revision="production", recursive=True)
    assert seen == [t.path for t in files]


def test_a_namespaced_line_is_pushed_and_tagged_through_the_registry(
    hub, models, tmp_path, monkeypatch
):
    writer = create_token(hub.root, f"writer-{tmp_path.name}", "writer")
    maintainer = create_token(hub.root, f"keeper-{tmp_path.name}", "maintainer")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("MINT_TOKEN", writer)
    local, _ = api.init(tmp_path / "local")
    api.base_add(local, "tiny-llama", models["base"])
    line = f"ns{tmp_path.name[-8:].replace('_', '')}/extra"
    made = api.commit(local, line, models["a1"], "one", author="dora").id
    code, _, err = cli(local.root, "push", hub.plain.url, line)
    assert code == 0, err
    assert api.resolve(hub.repo, line) == made
    code, _, err = cli(hub.plain.url, "tag", "t1", line)
    assert code == 0, err
    monkeypatch.setenv("MINT_TOKEN", maintainer)
    code, _, err = cli(hub.plain.url, "tag", "-d", f"{line}@t1")
    assert code == 0, err
    got = snapshot_download(line, **hub.kw(tmp_path / "hf"))
    assert Path(got).name == made[:40]
    local.close()
