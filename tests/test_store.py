"""The object store alone: content addressing, durability rules, verification."""

import hashlib
import os
import stat

import pytest

from mint.store import BlobCorrupt, BlobMissing, LocalObjectStore, copy_out


def test_put_is_content_addressed_and_read_only(tmp_path):
    store = LocalObjectStore(tmp_path / "objects")
    src = tmp_path / "f.bin"
    src.write_bytes(b"x" * 10_000)
    r = store.put(src)
    assert r.id == hashlib.sha256(b"x" * 10_000).hexdigest()
    assert r.written and r.size == 10_000
    path = store.local_path(r.id)
    assert path == tmp_path / "objects" / r.id[:2] / r.id[2:]
    assert not os.stat(path).st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    again = store.put(src)
    assert again.id == r.id and not again.written
    assert list(store.iter()) == [r.id]
    assert not any((tmp_path / "objects" / "tmp").iterdir())


def test_put_with_known_id_skips_existing_and_copies_new(tmp_path):
    store = LocalObjectStore(tmp_path / "o")
    src = tmp_path / "a"
    src.write_bytes(b"hello")
    known = hashlib.sha256(b"hello").hexdigest()
    assert store.put(src, blob_id=known).written
    assert not store.put(src, blob_id=known).written
    with store.open(known) as f:
        assert f.read() == b"hello"


def test_verify_catches_corruption_and_missing(tmp_path):
    store = LocalObjectStore(tmp_path / "o")
    r = store.put_bytes(b"payload")
    store.verify(r.id)
    path = store.local_path(r.id)
    os.chmod(path, 0o644)
    path.write_bytes(b"tampered")
    with pytest.raises(BlobCorrupt):
        store.verify(r.id)
    store.delete(r.id)
    with pytest.raises(BlobMissing):
        store.verify(r.id)
    with pytest.raises(BlobMissing):
        store.local_path(r.id)


def test_copy_out_reproduces_bytes_and_refuses_to_overwrite(tmp_path):
    store = LocalObjectStore(tmp_path / "o")
    data = os.urandom(3 * 1024 * 1024 + 7)
    r = store.put_bytes(data)
    dest = tmp_path / "out.bin"
    copy_out(store, r.id, dest)
    assert dest.read_bytes() == data
    with pytest.raises(FileExistsError):
        copy_out(store, r.id, dest)


def test_rejects_non_ids(tmp_path):
    store = LocalObjectStore(tmp_path / "o")
    for bad in ("../../etc/passwd", "abc", "G" * 64):
        with pytest.raises(ValueError):
            store.has(bad)
