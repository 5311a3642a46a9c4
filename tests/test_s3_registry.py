"""A registry whose blobs live in S3: large downloads are redirected to presigned S3 URLs, and
two replicas share one PostgreSQL database and one bucket.

Real parts only: `mint registry serve` processes, moto_server on 127.0.0.1 (tests/s3server.py),
the machine's PostgreSQL, `huggingface_hub` and mint's own remote client.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from huggingface_hub import HfApi, snapshot_download

from mint import api
from mint.errors import BlobCorrupt
from mint.remote.events import EventStream
from mint.remote.http import Client
from mint.remote.repo import RemoteRepo

from support import wait_until
from support.pgdb import pg_database
from support.registry import Registry, create_token, start_registry
from support.s3server import shared_server
from support.texts import TEAM_MACARON

pytestmark = pytest.mark.xdist_group("registry")

ME = "tester"
THRESHOLD = 4096  # bytes: the tiny adapters' weights are above it, their configs below


def sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@dataclass
class Replicas:
    bucket: str
    store: str  # s3://BUCKET/PREFIX
    db: str
    a: Registry
    b: Registry
    roots: tuple[Path, Path]
    reader: str
    writer: str

    def remote(self, server: Registry, token: str, cache: Path) -> RemoteRepo:
        return RemoteRepo(server.url, token, cache=cache)


@pytest.fixture
def moto(monkeypatch):
    server = shared_server()
    for name, value in server.env.items():
        monkeypatch.setenv(name, value)  # the registries inherit them
    return server


@pytest.fixture
def replicas(moto, tmp_path, models):
    """Two registries (A and B) over one PostgreSQL database and one S3 prefix; each has its
    own folder (config and local cache). Nothing is committed yet."""
    bucket = moto.new_bucket()
    store = f"s3://{bucket}/registry"
    with pg_database() as db:
        roots = (tmp_path / "a", tmp_path / "b")
        repo_a, _ = api.init(roots[0], db, store=store)
        repo_b, _ = api.init(roots[1], db, store=store)  # same database: already at head
        api.base_add(repo_a, "tiny-llama", models["base"])
        repo_a.close()
        repo_b.close()
        reader = create_token(roots[0], "rita", "reader")
        writer = create_token(roots[0], "wes", "admin")
        args = ("--presign-threshold", str(THRESHOLD))
        a = start_registry(roots[0], args=args)
        try:
            b = start_registry(roots[1], args=args)
        except BaseException:
            a.stop()
            raise
        try:
            yield Replicas(bucket, store, db, a, b, roots, reader, writer)
        finally:
            a.stop()
            b.stop()


@pytest.fixture
def local(tmp_path, models):
    """A local repository (SQLite, local store) with team/chat, a router and a set."""
    repo, _ = api.init(tmp_path / "local")
    api.base_add(repo, "tiny-llama", models["base"])
    c1 = api.commit(repo, "team/chat", models["a1"], "one", author=ME).id
    c2 = api.commit(repo, "team/chat", models["a2"], "two", author=ME).id
    api.commit(repo, "router", models["a1"], "router", author=ME)
    api.tag(repo, "router@v1", "router", by=ME)
    api.commit(repo, "coding", models["a3"], "coder", author=ME)
    api.promote(repo, c1, "production", by=ME)
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "mol.toml").write_text(TEAM_MACARON.replace('"team/macaron"', '"macaron"'))
    (folder / "route.md").write_text("Route the request to one expert.\n")
    (folder / "summary.md").write_text("Summarise the turn.\n")
    s1 = api.set_commit(repo, folder / "mol.toml", "the set", author=ME).id
    yield repo, {"c1": c1, "c2": c2, "set": s1}
    repo.close()


def push_all(repo, registry: Registry, token: str, tmp_path: Path) -> None:
    """Push every line of REPO to REGISTRY, then promote team/chat's first commit and the
    set to production there (push sends lines and tags, not channels)."""
    remote = RemoteRepo(registry.url, token, cache=tmp_path / "push-cache")
    try:
        lines = ["team/chat", "router", "coding", "macaron"]
        r = api.push(repo, remote, lines, tags=True)
        assert not r.refused and r.commits >= 5
        api.promote(remote, api.resolve(repo, "team/chat@production"), "production", by=ME)
        api.promote(remote, api.resolve(repo, "macaron"), "production", by=ME)
    finally:
        remote.close()


def test_large_files_redirect_to_presigned_s3_urls(replicas, local, moto, models, tmp_path):
    repo, ids = local
    push_all(repo, replicas.a, replicas.writer, tmp_path)
    weights, config = (
        models["a1"] / "adapter_model.safetensors",
        models["a1"] / "adapter_config.json",
    )
    assert weights.stat().st_size >= THRESHOLD > config.stat().st_size
    auth = {"Authorization": f"Bearer {replicas.reader}"}
    with httpx.Client(base_url=replicas.b.url, headers=auth, timeout=30) as http:
        url = f"/team/chat/resolve/production/{weights.name}"
        head = http.head(url)
        assert head.status_code == 200 and "location" not in head.headers
        assert head.headers["x-repo-commit"] == ids["c1"][:40]
        assert head.headers["x-linked-etag"] == f'"{sha(weights)}"'
        assert int(head.headers["x-linked-size"]) == weights.stat().st_size
        got = http.get(url)  # not followed: the raw answer
        assert got.status_code == 302 and got.headers["x-repo-commit"] == ids["c1"][:40]
        location = got.headers["location"]
        assert location.startswith(moto.url + f"/{replicas.bucket}/registry/")
        assert "X-Amz-Algorithm=AWS4-HMAC-SHA256" in location  # SigV4 (issue 35)
        plain = httpx.get(location)  # no token: the URL carries its own signature
        assert plain.status_code == 200 and hashlib.sha256(plain.content).hexdigest() == sha(
            weights
        )
        small = http.get(f"/team/chat/resolve/production/{config.name}")
        assert small.status_code == 200 and small.content == config.read_bytes()
        blob = http.get(f"/api/v1/blobs/{sha(weights)}")  # mint's own download route
        assert blob.status_code == 302 and blob.headers["location"].startswith(moto.url)
        assert http.get(f"/api/v1/blobs/{sha(config)}").content == config.read_bytes()

    folder = snapshot_download(
        "team/chat",
        revision="production",
        endpoint=replicas.b.url,
        token=replicas.reader,
        cache_dir=tmp_path / "hf",
    )
    for f in models["a1"].iterdir():
        assert sha(Path(folder) / f.name) == sha(f), f.name


def test_mint_verifies_a_redirected_blob(replicas, local, moto, models, tmp_path):
    repo, _ = local
    push_all(repo, replicas.a, replicas.writer, tmp_path)
    weights = sha(models["a2"] / "adapter_model.safetensors")
    key = f"registry/{weights[:2]}/{weights[2:]}"
    body = moto.client().get_object(Bucket=replicas.bucket, Key=key)["Body"].read()
    client = Client(replicas.a.url, replicas.reader)
    try:
        assert client.download(weights, tmp_path / "good") == len(body)
        assert sha(tmp_path / "good") == weights
        moto.client().put_object(Bucket=replicas.bucket, Key=key, Body=body[:-1] + b"\0")
        with pytest.raises(BlobCorrupt):
            client.download(weights, tmp_path / "bad")
        assert not (tmp_path / "bad").exists()
    finally:
        client.close()


def test_two_replicas_share_one_database_and_one_bucket(replicas, local, models, tmp_path):
    repo, ids = local
    push_all(repo, replicas.a, replicas.writer, tmp_path)
    events: list[dict] = []
    stream = EventStream(replicas.a.url, replicas.reader, tail=True)  # replica A's stream
    threading.Thread(target=stream.follow, args=(events.append,), daemon=True).start()
    wait_until(lambda: stream.connects == 1, "A's event stream never connected")
    clone = api.clone(replicas.b.url, tmp_path / "clone", token=replicas.reader, by=ME)
    fetched = {f.line: f for f in clone.fetched.lines}
    assert fetched.keys() >= {"team/chat", "macaron"}
    assert fetched["team/chat"].channels["production"] == ids["c1"]
    copy = api.open_repo(tmp_path / "clone")
    try:
        assert api.resolve(copy, "team/chat") == ids["c2"]
        out = tmp_path / "co"
        api.checkout(copy, "team/chat", out)
        for f in models["a2"].iterdir():
            assert sha(out / f.name) == sha(f), f.name
    finally:
        copy.close()
    hub = HfApi(endpoint=replicas.b.url, token=replicas.reader)
    assert hub.model_info("team/chat", revision="production").sha == ids["c1"][:40]

    on_b = RemoteRepo(replicas.b.url, replicas.writer, cache=tmp_path / "b-cache")
    try:
        api.promote(on_b, ids["c2"], "production", by=ME, force=True, reason="test")
    finally:
        on_b.close()
    try:
        wait_until(lambda: events, "A's stream never showed the move made on B")
    finally:
        stream.close()
    assert [(e["type"], e["data"]["line"], e["data"]["name"]) for e in events] == [
        ("channel.moved", "team/chat", "production")
    ]
    assert (events[0]["data"]["from"], events[0]["data"]["to"]) == (ids["c1"], ids["c2"])
    folder = snapshot_download(
        "team/chat",
        revision="production",
        endpoint=replicas.a.url,
        token=replicas.reader,
        cache_dir=tmp_path / "hf",
    )
    assert sha(Path(folder) / "adapter_model.safetensors") == sha(
        models["a2"] / "adapter_model.safetensors"
    )


def test_a_registry_on_s3_round_trips_push_checkout_and_serve(replicas, local, models, tmp_path):
    from mint.runtime.server import ServerThread
    from mint.runtime.service import open_runtime

    repo, ids = local
    push_all(repo, replicas.a, replicas.writer, tmp_path)
    remote = RemoteRepo(replicas.b.url, replicas.reader, cache=tmp_path / "serve-cache")
    try:
        out = tmp_path / "co"
        api.checkout(remote, "coding", out)
        for f in models["a3"].iterdir():
            assert sha(out / f.name) == sha(f), f.name
        runtime = open_runtime(remote, "macaron@production", str(models["base"]))
        try:
            with ServerThread(runtime) as url:
                body = {"model": "macaron", "messages": [{"role": "user", "content": "fix bug"}]}
                r = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
                assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
                health = httpx.get(url + "/healthz").json()
                assert health["commit"] == ids["set"]
        finally:
            runtime.close()
    finally:
        remote.close()
