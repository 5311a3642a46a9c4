"""A push names a stored blob only if the token may read it or has uploaded its bytes.

Knowing a blob's sha256 is not holding it. A token limited to `coding*` that learned the id of
a blob of line `secret` must not get those bytes by pushing a commit on `coding-x` that names
it (the store has it, so no upload was needed) and then reading it through that commit. An
honest client is not hindered: the registry reports such a blob as missing to that token, the
client uploads it (the proof: every byte hashed against the id), and the push goes in.

Every test runs a real `mint registry serve` (SQLite and PostgreSQL) and the real CLI.
"""

from __future__ import annotations

import hashlib
import os

import pytest
import sqlalchemy as sa

from mint import api
from mint import schema as s
from mint.cli import run_in_process
from mint.exchange import sending

from conftest import Result
from support.registry import create_token, error_of, start_registry


class World:
    """A registry whose line `secret` an admin pushed; tokens ada (admin) and cody (writer
    limited to coding*)."""

    def __init__(self, repo, models, tmp_path, monkeypatch):
        self.repo, self.models, self.tmp, self._env = repo, models, tmp_path, monkeypatch
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
        api.base_add(repo, "tiny-llama", models["base"])
        self.tokens = {
            "ada": create_token(repo.root, "ada", "admin"),
            "cody": create_token(repo.root, "cody", "writer", ("coding*",)),
        }
        self.server = start_registry(repo.root)
        self.url = self.server.url
        self.admin_work = self.work("admin")
        self.secret = api.commit(self.admin_work, "secret", models["a2"], "s", author="ann").id
        assert (
            self.mint("ada", "--repo", self.admin_work.root, "push", self.url, "secret").code == 0
        )
        self.secret_files = api.show(repo, "secret").files

    def work(self, name: str):
        work, _ = api.init(self.tmp / name)
        api.base_add(work, "tiny-llama", self.models["base"])
        return work

    def mint(self, who: str, *args) -> Result:
        self._env.setenv("MINT_TOKEN", self.tokens[who])
        return Result(*run_in_process([str(a) for a in args]))

    def client(self, who: str):
        return self.server.client(self.tokens[who])

    def grants(self) -> set[tuple[str, str]]:
        with self.repo.db.read() as conn:
            q = sa.select(s.blob_grants.c.token, s.blob_grants.c.blob_id)
            return {tuple(r) for r in conn.execute(q)}

    def has_commit(self, cid: str) -> bool:
        with self.repo.db.read() as conn:
            q = sa.select(s.commits.c.id).where(s.commits.c.id == cid)
            return conn.execute(q).first() is not None


@pytest.fixture
def world(repo, models, tmp_path, monkeypatch):
    w = World(repo, models, tmp_path, monkeypatch)
    yield w
    w.server.stop()
    w.admin_work.close()


def weights(files) -> str:
    return next(f.sha256 for p, f in files.items() if p.endswith(".safetensors"))


def config(files) -> str:
    return files["adapter_config.json"].sha256


def test_a_limited_token_cannot_name_a_stored_blob_it_never_uploaded(world):
    """The hole: cody knows secret's weights id and names it in a commit on coding-x, sending
    no bytes. Refused (403, naming the blob), nothing stored, and the blob stays unreadable."""
    secret_weights = weights(world.secret_files)
    with world.client("cody") as http:
        error_of(http.get(f"/api/v1/blobs/{secret_weights}"), 403, "Forbidden")
    # The adversary's commit: secret's files on one of cody's lines, built where the files
    # are (the wire form is all the registry sees; cody never uploads a byte of it).
    forge = world.work("forge")
    evil = api.commit(forge, "coding-x", world.models["a2"], "mine now", author="cody").id
    with forge.db.read() as conn:
        wire = sending.commit_wire(conn, evil)
    forge.close()
    assert weights(api.show(world.repo, "secret").files) in {b for b, _ in wire["files"].values()}
    with world.client("cody") as http:
        answer = http.post("/api/v1/objects", json={"commits": [wire]})
        error = error_of(answer, 403, "Forbidden")
        assert "\n" not in error["message"] and "upload its bytes" in error["message"]
        named = {f.sha256[:12] for f in world.secret_files.values()}
        assert any(short in error["message"] for short in named), error["message"]
        assert not world.has_commit(evil)
        error_of(http.get(f"/api/v1/blobs/{secret_weights}"), 403, "Forbidden")
        moved = http.post("/api/v1/lines/coding-x/head", json={"old": None, "new": evil})
        assert moved.status_code == 404
        # The registry reports the blobs cody may not read as missing (so an honest client
        # sends them); to an admin they are stored.
        ids = [secret_weights, config(world.secret_files)]
        assert http.post("/api/v1/blobs/missing", json={"ids": ids}).json()["missing"] == ids
    with world.client("ada") as http:
        assert http.post("/api/v1/blobs/missing", json={"ids": ids}).json()["missing"] == []
    assert "coding-x" not in {i.name for i in api.ls(world.repo)}
    assert world.grants() == set()


def test_an_honest_push_uploads_a_stored_blob_and_goes_in(world):
    """cody's own adapter has an adapter_config.json byte-identical to secret's, so that blob
    is stored already; the client uploads it anyway (asked to: it is missing to cody), which
    proves cody holds it, and the push succeeds. cody reads its own blobs afterwards."""
    ours = world.models["a1"]
    assert (ours / "adapter_config.json").read_bytes() == (
        world.models["a2"] / "adapter_config.json"
    ).read_bytes()
    work = world.work("cody")
    cid = api.commit(work, "coding-x", ours, "mine", author="cody").id
    files = api.show(work, cid).files
    assert config(files) == config(world.secret_files)  # the shared, already stored blob
    pushed = world.mint("cody", "--repo", work.root, "push", world.url, "coding-x")
    assert pushed.code == 0, pushed.err
    assert api.resolve(world.repo, "coding-x") == cid
    assert world.grants() == {("cody", f.sha256) for f in files.values()}  # every byte sent
    with world.client("cody") as http:
        for path, f in files.items():
            got = http.get(f"/api/v1/blobs/{f.sha256}")
            assert got.status_code == 200, path
            assert got.content == (ours / path).read_bytes()
        # Still not secret's weights: the shared config gave nothing else away.
        error_of(http.get(f"/api/v1/blobs/{weights(world.secret_files)}"), 403, "Forbidden")
    work.close()


def test_an_upload_of_stored_bytes_is_verified_and_gc_drops_grants_with_their_blobs(world):
    """An upload of a blob the store has is hashed all the same (wrong bytes: 422, no grant);
    right bytes make a grant, and gc deletes an unreferenced blob's grants with it."""
    secret_config = config(world.secret_files)
    with world.client("cody") as http:
        wrong = http.put(f"/api/v1/blobs/{secret_config}", content=b"not the bytes")
        error_of(wrong, 422)
        assert world.grants() == set()
        orphan = os.urandom(64)
        orphan_id = hashlib.sha256(orphan).hexdigest()
        assert http.put(f"/api/v1/blobs/{orphan_id}", content=orphan).status_code == 201
    assert world.grants() == {("cody", orphan_id)}
    plan = api.gc(world.repo, grace_seconds=0)
    assert orphan_id in plan.blobs and not world.repo.store.has(orphan_id)
    assert world.grants() == set()
