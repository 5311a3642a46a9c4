"""The Hub's upload protocol on a registry (issue 37): the unmodified huggingface_hub client
writes lines as it writes model repos, and what arrives is checked as `mint commit` checks a
folder. One real `mint registry serve` per database (SQLite, PostgreSQL) for the module; each
test writes lines of its own.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import subprocess
import sys
from urllib.parse import urlparse

import pytest
from huggingface_hub import snapshot_download
from huggingface_hub.errors import HfHubHTTPError

from mint import api
from mint.cli import run_in_process

from conftest import snapshot
from support import wait_until
from support.hubupload import files_of, hub_registry, variant

pytestmark = pytest.mark.xdist_group("registry")


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def hub(request, tmp_path_factory, models):
    with hub_registry(
        request.param, tmp_path_factory.mktemp(f"hub-up-{request.param}"), models
    ) as h:
        yield h


def one_line(exc: HfHubHTTPError, *words: str) -> str:
    """The server's message in the client's exception: one line, with WORDS in it."""
    said = exc.server_message or ""
    assert said and "\n" not in said, str(exc)
    for w in words:
        assert w.lower() in said.lower(), said
    assert said in str(exc)  # what the user reads
    return said


def test_upload_folder_makes_a_commit_that_downloads_byte_for_byte(hub, models, tmp_path):
    hf = hub.api("team-a")
    url = hf.create_repo("team-a/chat", exist_ok=True)
    assert url.repo_id == "team-a/chat"
    assert hf.create_repo("team-a/chat", exist_ok=True).repo_id == "team-a/chat"
    info = hf.upload_folder(repo_id="team-a/chat", folder_path=models["a1"], commit_message="v1")
    detail = api.show(hub.repo, "team-a/chat")
    assert info.oid == detail.id[:40] and detail.author == "team-a"
    assert detail.provenance == {"source": "hub-upload"} and detail.peft["r"] == 4
    got = snapshot_download(
        "team-a/chat", endpoint=hub.url, token=hub.tokens["reader"], cache_dir=tmp_path / "cache"
    )
    assert files_of(models["a1"]) == {k: v for k, v in files_of(got).items()}
    assert hub.repo.store.has(detail.files["adapter_model.safetensors"].sha256)
    assert api.fsck(hub.repo).ok


def test_a_stale_parent_commit_is_refused_and_the_head_stays(hub, models, tmp_path):
    hf = hub.api("writer")
    first = hf.upload_folder(repo_id="team-b/stale", folder_path=models["a1"], commit_message="1")
    second = hf.upload_folder(
        repo_id="team-b/stale",
        folder_path=variant(models["a1"], tmp_path / "v2", "2"),
        commit_message="2",
        parent_commit=first.oid,
    )
    before = snapshot(hub.repo)
    with pytest.raises(HfHubHTTPError) as caught:
        hf.upload_folder(
            repo_id="team-b/stale",
            folder_path=variant(models["a1"], tmp_path / "v3", "3"),
            commit_message="3",
            parent_commit=first.oid,
        )
    assert caught.value.response.status_code == 409
    one_line(caught.value, "moved", "commit on it")
    assert api.resolve(hub.repo, "team-b/stale")[:40] == second.oid
    assert snapshot(hub.repo)[1] == before[1]  # no row changed (the upload's blob may stay)


def test_tags_refs_and_commits_read_as_the_hub_writes_them(hub, models, tmp_path):
    hf = hub.api("writer")
    one = hf.upload_folder(
        repo_id="team-b/tagged", folder_path=models["a1"], commit_message="one\n\nbody"
    )
    two = hf.upload_folder(
        repo_id="team-b/tagged",
        folder_path=variant(models["a1"], tmp_path / "t2", "2"),
        commit_message="two",
    )
    hf.create_tag("team-b/tagged", tag="v1", revision=one.oid, tag_message="the first")
    hf.create_tag("team-b/tagged", tag="v1", revision=one.oid, exist_ok=True)
    with pytest.raises(HfHubHTTPError) as caught:  # a mint tag never moves
        hf.create_tag("team-b/tagged", tag="v1", revision=two.oid)
    assert caught.value.response.status_code == 409
    one_line(caught.value, "never moves")
    refs = hf.list_repo_refs("team-b/tagged")
    assert [(t.name, t.target_commit) for t in refs.tags] == [("v1", one.oid)]
    assert [b.name for b in refs.branches] == ["main"]
    commits = hf.list_repo_commits("team-b/tagged")
    assert [(c.commit_id, c.title) for c in commits] == [(two.oid, "two"), (one.oid, "one")]
    assert commits[1].message == "body" and commits[0].authors == ["writer"]
    with pytest.raises(HfHubHTTPError) as caught:
        hf.delete_tag(
            "team-b/tagged", tag="v1"
        )  # a writer's token: deleting a tag is a maintainer's
    assert caught.value.response.status_code == 403
    hub.api("maint").delete_tag("team-b/tagged", tag="v1")
    assert hf.list_repo_refs("team-b/tagged").tags == []


def test_delete_file_and_delete_folder_make_commits_without_them(hub, models, tmp_path):
    hf = hub.api("writer")
    folder = variant(models["a1"], tmp_path / "d", "d", **{"notes__a.md": "a", "notes__b.md": "b"})
    hf.upload_folder(repo_id="team-b/pruned", folder_path=folder, commit_message="with notes")
    assert {"notes/a.md", "notes/b.md", "README.md"} <= set(
        api.show(hub.repo, "team-b/pruned").files
    )
    hf.delete_file("README.md", repo_id="team-b/pruned")
    hf.delete_folder("notes", repo_id="team-b/pruned")
    assert set(api.show(hub.repo, "team-b/pruned").files) == {
        "adapter_config.json",
        "adapter_model.safetensors",
    }
    with pytest.raises(HfHubHTTPError) as caught:
        hf.delete_file("README.md", repo_id="team-b/pruned")
    assert caught.value.response.status_code == 404
    with pytest.raises(HfHubHTTPError) as caught:  # an adapter keeps its weights
        hf.delete_file("adapter_model.safetensors", repo_id="team-b/pruned")
    one_line(caught.value, "adapter_model.safetensors", "PEFT adapter folder")


def test_list_models_lists_the_tokens_lines_and_never_fails(hub, models):
    hub.api("team-a").upload_folder(
        repo_id="team-a/listed", folder_path=models["a1"], commit_message="x"
    )
    hub.api("team-b").upload_folder(
        repo_id="team-b/listed", folder_path=models["a1"], commit_message="x"
    )
    seen = {m.id for m in hub.api("team-a").list_models()}
    assert "team-a/listed" in seen and not any(n.startswith("team-b/") for n in seen)
    assert {m.id for m in hub.api("writer").list_models(search="listed")} == {
        "team-a/listed",
        "team-b/listed",
    }
    assert [m.id for m in hub.api("writer").list_models(author="team-b", search="listed")] == [
        "team-b/listed"
    ]
    assert len(list(hub.api("writer").list_models(limit=1))) == 1
    with hub.client("reader") as c:
        assert c.get("/api/models/").status_code == 200  # it was a 500 (issue 37)


def test_training_args_bin_is_kept_inert_and_shown_as_a_pickle(hub, models, tmp_path):
    pickled = b"PK\x03\x04" + os.urandom(64)  # torch.save's zip: mint never opens it
    folder = variant(models["a1"], tmp_path / "t", "t")
    (folder / "training_args.bin").write_bytes(pickled)
    hub.api("writer").upload_folder(
        repo_id="team-b/trained", folder_path=folder, commit_message="x"
    )
    detail = api.show(hub.repo, "team-b/trained")
    assert detail.pickles == ["training_args.bin"]
    assert (
        hub.repo.store.local_path(detail.files["training_args.bin"].sha256).read_bytes() == pickled
    )
    code, out, _ = run_in_process(["--repo", str(hub.repo.root), "show", "team-b/trained"])
    assert code == 0 and "training_args.bin  (a pickle: kept as bytes, never loaded)" in out
    code, out, _ = run_in_process(
        ["--repo", str(hub.repo.root), "show", "team-b/trained", "--json"]
    )
    assert json.loads(out)["pickles"] == ["training_args.bin"]
    with hub.client("reader") as c:
        c.cookies.set("mint_session", hub.tokens["reader"])
        page = c.get(f"/commit/{detail.id}").text
    assert 'training_args.bin <span class="pickle"' in page


# --- bad input: a 4xx with one line, nothing stored, fsck clean -------------------------------


def _commit(hub, line: str, body: bytes, who: str = "writer"):
    with hub.client(who) as c:
        return c.post(
            f"/api/models/{line}/commit/main",
            content=body,
            headers={"Content-Type": "application/x-ndjson"},
        )


def _ndjson(*items: dict) -> bytes:
    return b"".join(json.dumps(i).encode() + b"\n" for i in items)


def _header(summary: str = "x") -> dict:
    return {"key": "header", "value": {"summary": summary, "description": ""}}


def _file(path: str, data: bytes) -> dict:
    content = base64.b64encode(data).decode()
    return {"key": "file", "value": {"path": path, "content": content, "encoding": "base64"}}


def _refused(answer, status: int, *words: str) -> str:
    assert answer.status_code == status, answer.text
    said = answer.json()["error"]
    assert isinstance(said, str) and "\n" not in said and said == answer.headers["x-error-message"]
    for w in words:
        assert w.lower() in said.lower(), said
    return said


@pytest.mark.parametrize(
    "body, words",
    [
        (b"not json\n", ["not JSON"]),
        (_ndjson({"key": "file", "value": {}}), ["header"]),
        (_ndjson(_header(), {"key": "rename", "value": {"path": "x"}}), ["unknown key"]),
        (_ndjson(_header(), _file("../escape.json", b"{}")), ["unsafe", "'..'"]),
        (_ndjson(_header(), _file("/etc/passwd", b"x")), ["unsafe"]),
        (
            _ndjson(
                _header(),
                {"key": "file", "value": {"path": "a", "content": "%%", "encoding": "base64"}},
            ),
            ["base64"],
        ),
        (_ndjson(_header(), *[_file(f"f{i}.txt", b"x") for i in range(10_000)]), ["at most 5000"]),
    ],
    ids=["not-json", "no-header", "unknown-op", "dotdot", "absolute", "base64", "10000-files"],
)
def test_a_malformed_commit_is_one_line_and_stores_nothing(hub, body, words):
    before = snapshot(hub.repo)
    _refused(_commit(hub, "bad/input", body), 422, *words)
    assert snapshot(hub.repo) == before


def test_a_folder_that_is_no_adapter_is_refused_with_the_fix(hub, tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "README.md").write_text("no adapter here\n")
    before = snapshot(hub.repo)
    with pytest.raises(HfHubHTTPError) as caught:
        hub.api("writer").upload_folder(
            repo_id="bad/notes", folder_path=folder, commit_message="x"
        )
    assert caught.value.response.status_code == 422
    one_line(caught.value, "adapter_config.json", "save_pretrained")
    assert snapshot(hub.repo) == before and api.fsck(hub.repo).ok


def _batch(hub, line: str, oid: str, size: int, who: str = "writer") -> dict:
    with hub.client(who) as c:
        answer = c.post(
            f"/{line}.git/info/lfs/objects/batch",
            json={
                "operation": "upload",
                "transfers": ["basic"],
                "objects": [{"oid": oid, "size": size}],
            },
        )
    assert answer.status_code == 200, answer.text
    return answer.json()["objects"][0]


def test_lfs_bytes_that_are_not_their_oid_are_refused_and_never_named(hub):
    good, bad = b"\0real weights" * 100, b"\0other bytes!" * 100
    oid = hashlib.sha256(good).hexdigest()
    actions = _batch(hub, "bad/lfs", oid, len(good))["actions"]
    before = snapshot(hub.repo)
    import httpx

    _refused(httpx.put(actions["upload"]["href"], content=bad), 422, "nothing stored")
    assert snapshot(hub.repo) == before and not hub.repo.store.has(oid)
    lfs = {
        "key": "lfsFile",
        "value": {"path": "w.bin", "algo": "sha256", "oid": oid, "size": len(good)},
    }
    _refused(_commit(hub, "bad/lfs", _ndjson(_header(), lfs)), 422, "upload")
    with hub.client("writer") as c:  # its verify says so too
        _refused(c.post(actions["verify"]["href"], json={"oid": oid, "size": len(good)}), 422)
    assert snapshot(hub.repo) == before


def test_an_upload_url_is_the_tokens_own_and_tampering_breaks_it(hub):
    data = b"\0a blob" * 10
    oid = hashlib.sha256(data).hexdigest()
    href = _batch(hub, "bad/ticket", oid, len(data))["actions"]["upload"]["href"]
    import httpx

    for forged in (href.replace("by=writer", "by=admin"), href.replace("size=", "size=1")):
        assert httpx.put(forged, content=data).status_code == 403
    assert not hub.repo.store.has(oid)


def test_an_upload_that_stops_half_way_leaves_nothing(hub):
    data = b"\0" + os.urandom(1 << 20)
    oid = hashlib.sha256(data).hexdigest()
    href = urlparse(_batch(hub, "bad/cut", oid, len(data))["actions"]["upload"]["href"])
    before = snapshot(hub.repo)
    with socket.create_connection((href.hostname, href.port)) as s:
        head = (
            f"PUT {href.path}?{href.query} HTTP/1.1\r\nHost: {href.netloc}\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        )
        s.sendall(head.encode() + data[: len(data) // 2])
    temps = hub.repo.store.root / "tmp"
    wait_until(lambda: not any(temps.glob("blob-*")), "the cut upload's temp file goes")
    assert snapshot(hub.repo) == before and not hub.repo.store.has(oid)
    assert api.fsck(hub.repo).ok


def test_a_reader_cannot_upload_and_a_token_not_at_all(hub, models):
    with pytest.raises(HfHubHTTPError) as caught:
        hub.api("reader").upload_folder(
            repo_id="team-a/read", folder_path=models["a1"], commit_message="x"
        )
    assert caught.value.response.status_code == 403
    one_line(caught.value, "writer role", "ask an admin for a token")
    with pytest.raises(HfHubHTTPError) as caught:
        hub.api("team-a").upload_folder(
            repo_id="team-b/theirs", folder_path=models["a1"], commit_message="x"
        )
    one_line(caught.value, "outside the token's lines")
    with hub.server.client() as c:
        assert c.post("/api/models/x/commit/main", content=b"").status_code == 401


def test_without_hf_hub_disable_xet_the_user_is_told_to_set_it(hub, models):
    """What a user of huggingface_hub with hf_xet installed sees (the variable unset)."""
    script = (
        "import sys\nfrom huggingface_hub import HfApi\n"
        "try:\n"
        f"    HfApi(endpoint={hub.url!r}, token={hub.tokens['writer']!r}).upload_folder("
        f"repo_id='xet/try', folder_path={str(models['a1'])!r}, commit_message='x')\n"
        "except Exception as exc:\n    print(type(exc).__name__, exc)\n    sys.exit(3)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_XET"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "HF_HUB_DISABLE_XET=1" in done.stdout + done.stderr
    with hub.client() as c:
        said = _refused(
            c.get("/api/models/xet/try/xet-write-token/main", follow_redirects=True), 400
        )
    assert said.startswith("mint registries do not speak Xet: set HF_HUB_DISABLE_XET=1")


def test_an_upload_no_commit_names_is_garbage_with_what_it_learnt(hub, models, tmp_path):
    import httpx
    import sqlalchemy as sa
    from safetensors.torch import load_file, save_file

    from mint import schema as s

    # a3's tensors in a file of their own (its metadata says so): bytes no other test sends
    path = tmp_path / "abandoned.safetensors"
    tensors = load_file(models["a3"] / "adapter_model.safetensors")
    save_file(tensors, path, metadata={"format": "pt", "note": f"abandoned {hub.folder.name}"})
    weights = path.read_bytes()
    oid = hashlib.sha256(weights).hexdigest()
    assert not hub.repo.store.has(oid)
    href = _batch(hub, "team-b/abandoned", oid, len(weights))["actions"]["upload"]["href"]
    assert httpx.put(href, content=weights).status_code == 200

    def learnt() -> int:
        with hub.repo.db.read() as conn:
            h = s.hub_uploads.c
            return len(conn.execute(sa.select(h.blob_id).where(h.blob_id == oid)).all())

    assert hub.repo.store.has(oid) and learnt() == 1  # its pass read the tensors
    assert oid in api.gc(hub.repo, grace_seconds=0).blobs
    assert not hub.repo.store.has(oid) and learnt() == 0
    assert api.fsck(hub.repo).ok


# --- an S3 store: the client PUTs to the bucket, the registry verifies before publishing ------


@pytest.fixture
def s3_hub(tmp_path, models, monkeypatch):
    from support.s3server import shared_server

    moto = shared_server()
    for name, value in moto.env.items():
        monkeypatch.setenv(name, value)  # the registry inherits them
    bucket = moto.new_bucket()
    from support.hubupload import TOKENS, no_xet
    from support.registry import create_token, start_registry

    repo, _ = api.init(tmp_path / "repo", None, store=f"s3://{bucket}/reg")
    api.base_add(repo, "tiny-llama", models["base"])
    token = create_token(repo.root, "writer", *TOKENS["writer"])
    server = start_registry(repo.root)
    try:
        with no_xet():
            yield repo, server, token, moto
    finally:
        server.stop()
        repo.close()


def test_on_s3_the_bytes_go_to_the_bucket_and_are_verified_first(s3_hub, models, tmp_path):
    from huggingface_hub import HfApi

    repo, server, token, moto = s3_hub
    HfApi(endpoint=server.url, token=token).upload_folder(
        repo_id="team-s/chat", folder_path=models["a1"], commit_message="to s3"
    )
    weights = api.show(repo, "team-s/chat").files["adapter_model.safetensors"].sha256
    assert repo.store.has(weights)
    repo.store.verify(weights)
    # A presigned PUT of other bytes: the verify refuses it and publishes nothing.
    good = b"\0weights" * 64
    oid = hashlib.sha256(good).hexdigest()
    with server.client(token) as c:
        batch = c.post(
            "/team-s/chat.git/info/lfs/objects/batch",
            json={"operation": "upload", "objects": [{"oid": oid, "size": len(good)}]},
        ).json()["objects"][0]["actions"]
        assert batch["upload"]["href"].startswith(moto.url)  # straight to the bucket
        import httpx

        assert httpx.put(batch["upload"]["href"], content=b"\0other!!" * 64).is_success
        _refused(c.post(batch["verify"]["href"], json={"oid": oid, "size": len(good)}), 422)
    assert not repo.store.has(oid)
    assert api.fsck(repo).ok
