"""Blobs handed out by a registry are its ids' bytes, also when it sends them without hashing
them again (`mint.registry.blob_send`: checked once per process, then sent straight from the
file while the file system shows it unchanged).

A real `mint registry serve` over SQLite and PostgreSQL; an unmodified `huggingface_hub`
client downloads; a byte of the stored blob is flipped on disk between downloads.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from pathlib import Path

import httpx
import pytest
from huggingface_hub import hf_hub_download, snapshot_download
from huggingface_hub.errors import HfHubHTTPError

from mint import api

from support.registry import create_token, running_registry

pytestmark = [
    pytest.mark.xdist_group("registry"),
    pytest.mark.one_database(
        "postgresql",
        "the subject is the bytes handed out; test_registry_server reads commits on both"
        " databases",
    ),
]

LINE = "team/chat"
WEIGHTS = "adapter_model.safetensors"


def flip_byte(path: Path, at: int, keep_times: bool = False) -> None:
    """Damage the read-only blob file at PATH in place: one byte at AT inverted (the size
    stays); with KEEP_TIMES its mtime is set back as it was (its ctime cannot be)."""
    before = path.stat()
    os.chmod(path, before.st_mode | stat.S_IWUSR)
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.chmod(path, before.st_mode)
    if keep_times:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def nothing_landed(cache: Path, blob: str) -> bool:
    """Whether a failed download left nothing of blob BLOB in a Hub cache: no cached blob of
    that id (an `.incomplete` one is empty), no snapshot entry of the weights."""
    kept = [p for p in cache.rglob(f"blobs/{blob}*") if p.stat().st_size]
    return not kept and not any(p.name == WEIGHTS for p in cache.rglob("*"))


@contextlib.contextmanager
def serving(repo, models, env: dict | None = None):
    """REPO with LINE (adapter a1) behind a registry (ENV added to its environment); yields
    (registry, token, weights blob id, the blob's file, the weights' bytes)."""
    api.base_add(repo, "tiny-llama", models["base"])
    api.commit(repo, LINE, models["a1"], "one", author="alice")
    data = (models["a1"] / WEIGHTS).read_bytes()
    blob = hashlib.sha256(data).hexdigest()
    token = create_token(repo.root, "reader", "reader")
    with running_registry(repo.root, env=env) as registry:
        yield registry, token, blob, repo.store.local_path(blob), data


@pytest.fixture
def served(repo, models):
    with serving(repo, models) as got:
        yield got


def download(registry, token: str, cache: Path) -> Path:
    path = hf_hub_download(LINE, WEIGHTS, endpoint=registry.url, token=token, cache_dir=cache)
    return Path(path)


def test_a_corrupt_blob_is_never_handed_out_through_the_hub(served, tmp_path):
    registry, token, blob, stored, data = served
    # downloaded whole once: the server has checked the blob and sends it unhashed from now on
    assert download(registry, token, tmp_path / "good").read_bytes() == data
    flip_byte(stored, len(data) // 2, keep_times=True)

    with pytest.raises(HfHubHTTPError) as err:
        download(registry, token, tmp_path / "bad")
    assert err.value.response.status_code == 500
    assert "corrupt" in str(err.value) and "mint fsck" in str(err.value)
    assert nothing_landed(tmp_path / "bad", blob)
    with pytest.raises(HfHubHTTPError):
        snapshot_download(LINE, endpoint=registry.url, token=token, cache_dir=tmp_path / "snap")
    assert nothing_landed(tmp_path / "snap", blob)

    # a client resuming a download (a Range) and mint's own blob route get no byte of it either
    auth = {"Authorization": f"Bearer {token}"}
    resolve = f"{registry.url}/{LINE}/resolve/main/{WEIGHTS}"
    for url in (resolve, f"{registry.url}/api/v1/blobs/{blob}"):
        for headers in ({}, {"Range": "bytes=100-"}):
            r = httpx.get(url, headers={**auth, **headers})
            assert r.status_code == 500, (url, headers, r.status_code)
            assert data[100:200] not in r.content and "corrupt" in r.text
    assert registry.alive()

    # the good bytes again (as a repairing commit writes them): checked again, served again
    flip_byte(stored, len(data) // 2)
    assert download(registry, token, tmp_path / "again").read_bytes() == data


def test_a_blob_damaged_before_its_first_download_is_refused(served, tmp_path):
    registry, token, blob, stored, data = served
    flip_byte(stored, 0)
    with pytest.raises(HfHubHTTPError) as err:
        download(registry, token, tmp_path / "bad")
    assert err.value.response.status_code == 500 and "corrupt" in str(err.value)
    assert nothing_landed(tmp_path / "bad", blob)


def test_whole_files_and_ranges_are_the_blobs_bytes(served, tmp_path):
    registry, token, blob, _, data = served
    auth = {"Authorization": f"Bearer {token}"}
    got = snapshot_download(LINE, endpoint=registry.url, token=token, cache_dir=tmp_path / "s")
    assert (Path(got) / WEIGHTS).read_bytes() == data
    resolve = f"{registry.url}/{LINE}/resolve/main/{WEIGHTS}"
    size = len(data)
    for url in (resolve, f"{registry.url}/api/v1/blobs/{blob}"):
        assert httpx.get(url, headers=auth).content == data
        for spec, want in (
            ("bytes=0-0", data[:1]),
            ("bytes=7-1000", data[7:1001]),
            (f"bytes={size - 5}-", data[-5:]),
            ("bytes=-9", data[-9:]),
            (f"bytes=3-{size + 100}", data[3:]),
        ):
            part = httpx.get(url, headers={**auth, "Range": spec})
            assert part.status_code == 206 and part.content == want, spec
            assert int(part.headers["content-length"]) == len(want)


def test_a_blob_checked_while_it_is_sent_breaks_off_then_is_refused(repo, models, tmp_path):
    # A threshold of 0 bytes: every whole blob this process has not checked yet is hashed
    # while it is sent (as blobs over 2 GiB are), its last read held back until the hash.
    with serving(repo, models, {"MINT_REGISTRY_CHECK_BEFORE": "0"}) as served:
        registry, token, blob, stored, data = served
        assert download(registry, token, tmp_path / "good").read_bytes() == data
        flip_byte(stored, len(data) - 1)
        auth = {"Authorization": f"Bearer {token}"}
        url = f"{registry.url}/{LINE}/resolve/main/{WEIGHTS}"
        got = b""
        with pytest.raises(httpx.RemoteProtocolError):  # the answer breaks off before its end
            with httpx.stream("GET", url, headers=auth) as r:
                assert r.status_code == 200
                for chunk in r.iter_raw():
                    got += chunk
        assert len(got) < len(data)
        again = httpx.get(url, headers=auth)  # known damaged now: a clean error at once
        assert again.status_code == 500 and "corrupt" in again.text
        with pytest.raises(HfHubHTTPError) as err:
            download(registry, token, tmp_path / "bad")
        assert err.value.response.status_code == 500 and "mint fsck" in str(err.value)
        assert nothing_landed(tmp_path / "bad", blob)
        flip_byte(stored, len(data) - 1)
        assert download(registry, token, tmp_path / "again").read_bytes() == data
