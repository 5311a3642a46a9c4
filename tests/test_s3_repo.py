"""A repository whose blobs live in S3 (`mint init --store s3://BUCKET/PREFIX`), through the
real CLI, against a real S3 API (moto_server on 127.0.0.1)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from mint import api
from mint.cli import run_in_process

from conftest import Result, one_line_error
from support.s3server import shared_server


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def moto(monkeypatch):
    server = shared_server()
    for name, value in server.env.items():
        monkeypatch.setenv(name, value)
    return server


@pytest.fixture
def s3repo(moto, tmp_path, models):
    """`mint init --store s3://BUCKET/team/blobs`, a base registered; runs the CLI in it."""
    bucket = moto.new_bucket()
    root = tmp_path / "repo"
    r = Result(*run_in_process(["init", str(root), "--store", f"s3://{bucket}/team/blobs"]))
    assert r.code == 0 and f"blobs: s3://{bucket}/team/blobs" in r.out, r

    def mint(*args) -> Result:
        return Result(*run_in_process(["--repo", str(root), *map(str, args)]))

    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    mint.root, mint.bucket = root, bucket
    return mint


def keys(moto, bucket: str) -> list[str]:
    return [o["Key"] for o in moto.client().list_objects_v2(Bucket=bucket).get("Contents", [])]


def test_commit_and_checkout_keep_blobs_in_s3(s3repo, moto, models, tmp_path):
    config = json.loads((s3repo.root / ".mint" / "config.json").read_text())
    assert config["store"] == f"s3://{s3repo.bucket}/team/blobs"
    r = s3repo("commit", "chat", models["a1"], "-m", "first", "--json")
    assert r.code == 0, r
    files = sorted(p.name for p in models["a1"].iterdir())
    stored = keys(moto, s3repo.bucket)
    for name in files:
        blob = sha(models["a1"] / name)
        assert f"team/blobs/{blob[:2]}/{blob[2:]}" in stored, name
    assert not (s3repo.root / ".mint" / "objects").exists()
    out = tmp_path / "co"
    assert s3repo("checkout", "chat", out).code == 0
    assert sorted(p.name for p in out.iterdir()) == files
    for name in files:
        assert sha(out / name) == sha(models["a1"] / name), name
    assert s3repo("fsck").code == 0

    repo = api.open_repo(s3repo.root)
    try:
        weights = api.show(repo, "chat").files["adapter_model.safetensors"].sha256
        path = repo.store.local_path(weights)  # through the verified local cache
        assert path.is_relative_to(s3repo.root / ".mint" / "cache") and sha(path) == weights
    finally:
        repo.close()


def test_fsck_finds_a_corrupt_and_a_missing_s3_object(s3repo, moto, models):
    assert s3repo("commit", "chat", models["a1"], "-m", "a").code == 0
    weights = sha(models["a1"] / "adapter_model.safetensors")
    key = f"team/blobs/{weights[:2]}/{weights[2:]}"
    body = moto.client().get_object(Bucket=s3repo.bucket, Key=key)["Body"].read()
    damaged = body[:-1] + bytes([body[-1] ^ 0xFF])
    moto.client().put_object(Bucket=s3repo.bucket, Key=key, Body=damaged)
    r = s3repo("fsck", "--json")
    assert r.code == 1 and any(weights in p and "corrupt" in p for p in r.json()["problems"])
    moto.client().delete_object(Bucket=s3repo.bucket, Key=key)
    r = s3repo("fsck")
    assert r.code == 1 and f"missing blob {weights}" in r.out
    assert s3repo("commit", "chat2", models["a1"], "-m", "again").code == 0  # puts it back
    assert s3repo("fsck").code == 0


def test_gc_removes_an_unreferenced_s3_blob(s3repo, moto, models):
    assert s3repo("commit", "chat", models["a1"], "-m", "a").code == 0
    repo = api.open_repo(s3repo.root)
    try:
        orphan = repo.store.put_bytes(b"nobody refers to me").id
    finally:
        repo.close()
    plan = s3repo("gc", "--dry-run", "--grace", "0", "--json").json()
    assert plan["blobs"] == [orphan] and plan["bytes"] == len(b"nobody refers to me")
    assert s3repo("gc", "--grace", "3600").code == 0  # too young
    assert f"team/blobs/{orphan[:2]}/{orphan[2:]}" in keys(moto, s3repo.bucket)
    assert s3repo("gc", "--grace", "0", "--json").json()["executed"]
    assert f"team/blobs/{orphan[:2]}/{orphan[2:]}" not in keys(moto, s3repo.bucket)
    assert s3repo("fsck").code == 0


def test_init_refuses_a_bucket_that_does_not_answer(moto, tmp_path):
    root = tmp_path / "repo"
    r = Result(*run_in_process(["init", str(root), "--store", "s3://no-such-bucket-here/x"]))
    one_line_error(r, "no-such-bucket-here")
    assert not (root / ".mint" / "config.json").exists()
    r = Result(*run_in_process(["init", str(root), "--store", "gs://bucket/x"]))
    one_line_error(r, "s3://")


def test_the_cli_does_not_load_boto3_until_a_store_needs_it():
    code = (
        "import sys; from mint.cli import run_in_process; run_in_process(['--help']); "
        "import mint.store; print([m for m in ('boto3', 'botocore') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


class Calls:
    """How many requests of each kind a store's boto3 client sent (botocore's own events)."""

    def __init__(self, store):
        self.counts: dict[str, int] = {}
        store.client.meta.events.register("before-call.s3", self._seen)

    def _seen(self, model, **_):
        self.counts[model.name] = self.counts.get(model.name, 0) + 1

    def take(self) -> dict[str, int]:
        counts, self.counts = self.counts, {}
        return counts


def test_gc_on_s3_plans_from_listings_and_deletes_in_batches(s3repo, moto, models, monkeypatch):
    from mint import maintenance

    assert s3repo("commit", "chat", models["a1"], "-m", "a").code == 0
    repo = api.open_repo(s3repo.root)
    try:
        orphans = sorted(repo.store.put_bytes(f"orphan {n}".encode()).id for n in range(25))
        calls = Calls(repo.store)
        plan, cutoff = maintenance.plan_gc(repo, grace_seconds=0)
        assert plan.blobs == orphans and plan.bytes == sum(len(f"orphan {n}") for n in range(25))
        planned = calls.take()
        assert planned.get("ListObjectsV2", 0) >= 1 and "HeadObject" not in planned, planned
        monkeypatch.setattr(maintenance, "BATCH", 10)
        done = maintenance.execute_gc(repo, plan, cutoff)
        assert done.executed and done.blobs == orphans and done.bytes == plan.bytes
        assert calls.take()["DeleteObjects"] == 3  # 25 keys in batches of 10
        stored = keys(moto, s3repo.bucket)
        assert not any(f"team/blobs/{b[:2]}/{b[2:]}" in stored for b in orphans)
        assert maintenance.fsck(repo).ok
    finally:
        repo.close()


def test_gc_on_s3_keeps_blobs_that_became_live_or_young_after_the_plan(s3repo, models):
    from mint import maintenance

    assert s3repo("base", "ls").code == 0
    repo = api.open_repo(s3repo.root)
    try:
        reused = {repo.store.put(p).id for p in models["a2"].iterdir()}  # a crashed commit's
        touched = repo.store.put_bytes(b"about to be referred to again").id
        dead = repo.store.put_bytes(b"nobody wants me").id
        plan, cutoff = maintenance.plan_gc(repo, grace_seconds=0)
        assert set(plan.blobs) == reused | {touched, dead}
        api.commit(repo, "y", models["a2"], "reuses the orphans", author="t")
        repo.store.touch(touched)  # its new mtime is later than the plan's cutoff
        done = maintenance.execute_gc(repo, plan, cutoff)
        assert done.blobs == [dead]
        assert repo.store.missing(reused | {touched, dead}) == [dead]
        for f in api.show(repo, "y").files.values():
            repo.store.verify(f.sha256)
        assert maintenance.fsck(repo).ok
    finally:
        repo.close()
