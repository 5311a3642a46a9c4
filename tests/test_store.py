"""The object stores alone: content addressing, integrity, durability rules, upkeep.

`ObjectStoreTests` holds the tests every store must pass (as dulwich's object store
tests do); each subclass gives a fresh store and a way to damage a stored blob.
"""

import errno
import fcntl
import gc
import hashlib
import os
import stat
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from mint.store import (
    BlobChanged,
    BlobCorrupt,
    BlobMissing,
    LocalObjectStore,
    MemoryObjectStore,
    ObjectStore,
    copy_out,
)
from mint.store.local import COPY_CHUNK


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ObjectStoreTests:
    """The contract of `ObjectStore`. Subclasses define `store` and `corrupt`."""

    @pytest.fixture
    def store(self, tmp_path) -> ObjectStore:
        raise NotImplementedError

    def corrupt(self, store, blob_id: str, data: bytes) -> None:
        """Replace the stored bytes of BLOB_ID with DATA, behind the store's back."""
        raise NotImplementedError

    def age(self, store, blob_id: str, seconds: float) -> None:
        """Make a stored blob look as if it was last written SECONDS ago."""
        raise NotImplementedError

    def leave_temp(self, store, age: float) -> str:
        """Leave a temp file as a writer that died AGE seconds ago would; its name."""
        raise NotImplementedError

    @pytest.fixture
    def src(self, tmp_path):
        path = tmp_path / "f.bin"
        path.write_bytes(b"x" * 10_000)
        return path

    # --- writing ---------------------------------------------------------------

    def test_is_an_object_store(self, store):
        assert isinstance(store, ObjectStore)

    def test_put_is_content_addressed(self, store, src):
        r = store.put(src)
        assert r.id == sha(b"x" * 10_000) and r.written and r.size == 10_000
        again = store.put(src)
        assert again.id == r.id and again.size == 10_000 and not again.written
        assert list(store.iter()) == [r.id]
        with store.open(r.id) as f:
            assert f.read() == b"x" * 10_000

    def test_local_path_is_a_read_only_file_of_the_bytes(self, store, src):
        r = store.put(src)
        path = store.local_path(r.id)
        assert path.read_bytes() == b"x" * 10_000
        assert not os.stat(path).st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)

    def test_put_with_known_id_skips_existing_and_copies_new(self, store, tmp_path):
        src = tmp_path / "a"
        src.write_bytes(b"hello")
        known = sha(b"hello")
        assert store.put(src, blob_id=known).written
        src.unlink()  # a good stored copy is kept without reading the source
        r = store.put(src, blob_id=known)
        assert r == type(r)(known, 5, False)
        with store.open(known) as f:
            assert f.read() == b"hello"

    def test_put_with_wrong_id_refuses_and_stores_nothing(self, store, tmp_path):
        src = tmp_path / "a"
        src.write_bytes(b"what the caller hashed")
        with pytest.raises(BlobChanged) as err:
            store.put(src, blob_id=sha(b"something else"))
        assert err.value.expected == sha(b"something else")
        assert err.value.actual == sha(b"what the caller hashed")
        assert err.value.path == str(src)
        assert list(store.iter()) == [] and store.stale_temps(-60) == []

    def test_put_refuses_a_file_that_changed_after_it_was_hashed(self, store, tmp_path):
        src = tmp_path / "adapter_model.safetensors"
        src.write_bytes(b"v1" * 1000)
        indexed = sha(src.read_bytes())  # the commit hashes first...
        before = src.stat()
        src.write_bytes(b"v2" * 1000)  # ...a trainer rewrites the file...
        os.utime(src, ns=(before.st_atime_ns, before.st_mtime_ns))  # (stat cannot tell)
        with pytest.raises(BlobChanged):
            store.put(src, blob_id=indexed)  # ...and wrong bytes never land under the id
        assert not store.has(indexed) and not store.has(sha(b"v2" * 1000))
        assert store.stale_temps(-60) == []

    def test_concurrent_puts_of_one_blob_agree(self, store):
        data = os.urandom(256 * 1024)
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda _: store.put_bytes(data), range(16)))
        assert {r.id for r in results} == {sha(data)} and any(r.written for r in results)
        store.verify(sha(data))
        assert list(store.iter()) == [sha(data)] and store.stale_temps(-60) == []

    def test_put_bytes(self, store):
        r = store.put_bytes(b"payload")
        assert r.id == sha(b"payload") and r.size == 7 and r.written
        assert not store.put_bytes(b"payload").written
        with store.open(r.id) as f:
            assert f.read() == b"payload"

    def test_put_repairs_a_corrupt_blob(self, store, src):
        r = store.put(src)
        self.corrupt(store, r.id, b"rotten")
        with pytest.raises(BlobCorrupt):
            store.verify(r.id)
        assert store.put(src, blob_id=r.id).written
        store.verify(r.id)
        self.corrupt(store, r.id, b"rotten again")
        assert store.put(src).written
        store.verify(r.id)
        assert store.local_path(r.id).read_bytes() == b"x" * 10_000

    def test_put_bytes_repairs_a_corrupt_blob(self, store):
        r = store.put_bytes(b"payload")
        self.corrupt(store, r.id, b"rotten")
        assert store.put_bytes(b"payload").written
        store.verify(r.id)

    def test_put_of_an_existing_blob_touches_it(self, store, src):
        r = store.put(src)
        self.age(store, r.id, 3600)
        store.put(src, blob_id=r.id)
        assert store.mtime(r.id) > time.time() - 60
        self.age(store, r.id, 3600)
        store.put(src)
        assert store.mtime(r.id) > time.time() - 60
        b = store.put_bytes(b"payload")
        self.age(store, b.id, 3600)
        store.put_bytes(b"payload")
        assert store.mtime(b.id) > time.time() - 60

    # --- reading and verifying -------------------------------------------------

    def test_verify_catches_corruption_and_missing(self, store):
        r = store.put_bytes(b"payload")
        store.verify(r.id)
        self.corrupt(store, r.id, b"tampered")
        with pytest.raises(BlobCorrupt) as err:
            store.verify(r.id)
        assert err.value.blob_id == r.id and err.value.actual == sha(b"tampered")
        store.delete(r.id)
        for method in (store.verify, store.local_path, store.open, store.size, store.mtime):
            with pytest.raises(BlobMissing):
                method(r.id)

    def test_copy_out_reproduces_bytes_and_refuses_to_overwrite(self, store, tmp_path):
        data = os.urandom(3 * 1024 * 1024 + 7)
        r = store.put_bytes(data)
        dest = tmp_path / "out.bin"
        assert copy_out(store, r.id, dest) == len(data)
        assert dest.read_bytes() == data
        with pytest.raises(FileExistsError):
            copy_out(store, r.id, dest)
        assert dest.read_bytes() == data

    def test_copy_out_refuses_corrupt_bytes_and_leaves_nothing(self, store, tmp_path):
        r = store.put_bytes(b"the committed bytes")
        self.corrupt(store, r.id, b"the committed bytez")
        dest = tmp_path / "out.bin"
        with pytest.raises(BlobCorrupt):
            copy_out(store, r.id, dest)
        assert not dest.exists()
        store.delete(r.id)
        with pytest.raises(BlobMissing):
            copy_out(store, r.id, dest)
        assert not dest.exists()

    def test_rejects_non_ids(self, store, tmp_path):
        src = tmp_path / "a"
        src.write_bytes(b"a")
        calls = (
            store.has,
            store.open,
            store.local_path,
            store.verify,
            store.delete,
            store.size,
            store.mtime,
            store.touch,
            lambda bad: store.put(src, blob_id=bad),
        )
        for bad in ("../../etc/passwd", "abc", "G" * 64, "A" * 64):
            for call in calls:
                with pytest.raises(ValueError):
                    call(bad)

    # --- upkeep ----------------------------------------------------------------

    def test_touch_makes_a_blob_young(self, store):
        before_put = time.time()
        r = store.put_bytes(b"payload")
        assert before_put <= store.mtime(r.id) <= time.time()  # gc compares with time.time()
        self.age(store, r.id, 3600)
        before = store.mtime(r.id)
        before_touch = time.time()
        store.touch(r.id)
        assert store.mtime(r.id) > before + 3000 and store.mtime(r.id) >= before_touch
        store.delete(r.id)
        with pytest.raises(BlobMissing):
            store.touch(r.id)

    def test_delete_and_iter(self, store):
        ids = sorted(store.put_bytes(d).id for d in (b"a", b"b", b"c"))
        assert list(store.iter()) == ids
        assert store.size(ids[0]) == 1
        store.delete(ids[1])
        store.delete(ids[1])  # absent: nothing happens
        assert list(store.iter()) == [ids[0], ids[2]]
        assert not store.has(ids[1]) and store.has(ids[0])

    def test_stale_temps_are_listed_by_age_and_removed(self, store):
        old = self.leave_temp(store, 7200)
        young = self.leave_temp(store, 0)
        assert store.stale_temps(3600) == [old]
        assert sorted(store.stale_temps(-60)) == sorted([old, young])
        store.remove_temp(old)
        store.remove_temp(old)  # gone: nothing happens
        assert store.stale_temps(3600) == []
        assert store.stale_temps(-60) == [young]


class TestLocalObjectStore(ObjectStoreTests):
    @pytest.fixture
    def store(self, tmp_path):
        return LocalObjectStore(tmp_path / "objects")

    def corrupt(self, store, blob_id, data):
        path = store.local_path(blob_id)
        os.chmod(path, 0o644)
        path.write_bytes(data)
        os.chmod(path, 0o444)

    def age(self, store, blob_id, seconds):
        t = time.time() - seconds
        os.utime(store.local_path(blob_id), (t, t))

    def leave_temp(self, store, age):
        store.tmp.mkdir(parents=True, exist_ok=True)
        path = store.tmp / f"blob-dead{len(list(store.tmp.iterdir()))}"
        path.write_bytes(b"half a blob")
        t = time.time() - age
        os.utime(path, (t, t))
        return path.name

    def test_layout(self, store, src, tmp_path):
        r = store.put(src)
        assert store.local_path(r.id) == tmp_path / "objects" / r.id[:2] / r.id[2:]
        assert not any(store.tmp.iterdir())  # no temp file left behind

    def test_a_live_writers_temp_is_not_stale(self, store):
        live = self.leave_temp(store, 7200)
        with open(store.tmp / live, "rb") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # as a writer that still runs holds it
            assert store.stale_temps(3600) == []
            store.remove_temp(live)
            assert (store.tmp / live).exists()
        assert store.stale_temps(3600) == [live]  # the writer is gone: its lock with it

    def test_remove_temp_takes_bare_names_only(self, store, tmp_path):
        victim = tmp_path / "victim"
        victim.write_bytes(b"keep me")
        for bad in ("", ".", "..", "../../victim", "/etc/passwd", "a/b"):
            with pytest.raises(ValueError):
                store.remove_temp(bad)
        assert victim.exists()

    def test_adopt_takes_only_the_named_temp_file_of_this_store(self, store, src, tmp_path):
        """A read-ahead child hands its staged temp files over (mint.commits.ahead): the
        store adopts a descriptor only for a temp file of its own, and only that very file."""
        staged = store.stage(src, prefix="blob-ahead-1-")
        other = store.stage(src)
        outside = tmp_path / "blob-outside"
        outside.write_bytes(src.read_bytes())
        fd = os.dup(staged.temp.fd)
        for path, size in (
            (outside, staged.size),  # not in the store's tmp/
            (other.temp.path, staged.size),  # another file than the descriptor's
            (staged.temp.path, staged.size + 1),  # another size than was staged
        ):
            with pytest.raises(ValueError):
                store.adopt(fd, str(path), staged.id, size)
        adopted = store.adopt(fd, str(staged.temp.path), staged.id, staged.size)
        staged.temp.published = True  # its descriptor closes; the adopted one holds the lock
        staged.discard()
        store.remove_leftovers("blob-ahead-1-")  # locked by the adopted descriptor: kept
        assert adopted.publish().id == staged.id
        assert store.local_path(staged.id).read_bytes() == src.read_bytes()
        other.discard()
        assert not any(store.tmp.iterdir())

    @pytest.mark.parametrize("how", ["copy_file_range", "EXDEV", "absent"])
    def test_a_put_copies_in_the_kernel_or_else_reads_and_writes(
        self, store, tmp_path, monkeypatch, how
    ):
        """The copy goes through copy_file_range where the kernel can (what is hashed is read
        back from the copy); across file systems it cannot before Linux 5.3 (EXDEV), and off
        Linux there is none: the bytes are read and written instead. Same blob either way."""
        data = os.urandom(3 * 4 * 1024 * 1024 + 12345)  # several chunks and a partial one
        src = tmp_path / "big.bin"
        src.write_bytes(data)
        real, calls = os.copy_file_range, []

        def cross_device(*args):
            calls.append(args)
            raise OSError(errno.EXDEV, "Invalid cross-device link")

        if how == "EXDEV":
            monkeypatch.setattr(os, "copy_file_range", cross_device)
        elif how == "absent":
            monkeypatch.delattr(os, "copy_file_range")
        else:
            monkeypatch.setattr(os, "copy_file_range", lambda *a: calls.append(a) or real(*a))
        put = store.put(src)
        assert put.id == hashlib.sha256(data).hexdigest() and put.size == len(data)
        assert store.local_path(put.id).read_bytes() == data
        chunks = -(-len(data) // COPY_CHUNK) + 1  # the last call copies nothing: the end
        assert len(calls) == {"copy_file_range": chunks, "EXDEV": 1, "absent": 0}[how]
        assert not any(store.tmp.iterdir())

    def test_remove_leftovers_removes_a_dead_writers_temps_only(self, store, src):
        dead = store.stage(src, prefix="blob-ahead-7-")
        live = store.stage(src, prefix="blob-ahead-8-")
        dead.temp.published = True  # closed as a killed writer's: unlocked, not removed
        dead.discard()
        store.remove_leftovers("blob-ahead-7-")
        assert sorted(store.tmp.iterdir()) == [live.temp.path]
        live.discard()


class TestMemoryObjectStore(ObjectStoreTests):
    @pytest.fixture
    def store(self, tmp_path):
        return MemoryObjectStore()

    def corrupt(self, store, blob_id, data):
        store._blobs[blob_id] = data
        store._drop_spill(blob_id)

    def age(self, store, blob_id, seconds):
        store._mtimes[blob_id] = time.time() - seconds

    def leave_temp(self, store, age):
        name = f"blob-dead{len(store._temps)}"
        store._temps[name] = time.time() - age
        return name

    def test_local_path_spills_into_a_private_folder_removed_with_the_store(self):
        store = MemoryObjectStore()
        r = store.put_bytes(b"payload")
        path = store.local_path(r.id)
        assert path.read_bytes() == b"payload"
        folder = path.parent
        store.delete(r.id)
        assert not path.exists()
        store.local_path(store.put_bytes(b"other").id)
        del store
        gc.collect()
        assert not folder.exists()


@pytest.fixture(scope="session")
def moto_server():
    from support.s3server import shared_server

    return shared_server()


@pytest.fixture
def moto(moto_server, monkeypatch):
    """The moto server, with the standard AWS settings pointing at it."""
    for name, value in moto_server.env.items():
        monkeypatch.setenv(name, value)
    return moto_server


class TestS3ObjectStore(ObjectStoreTests):
    """The same contract against a real S3 API (moto_server), a fresh bucket per test."""

    @pytest.fixture
    def store(self, tmp_path, moto):
        from mint.store import S3ObjectStore

        bucket = moto.new_bucket()
        return S3ObjectStore(bucket, "some/prefix", cache_dir=tmp_path / "cache")

    def corrupt(self, store, blob_id, data):
        store_server().client().put_object(Bucket=store.bucket, Key=store._key(blob_id), Body=data)

    def age(self, store, blob_id, seconds):
        key = store._key(blob_id)
        store_server().client().copy_object(
            Bucket=store.bucket,
            Key=key,
            CopySource={"Bucket": store.bucket, "Key": key},
            MetadataDirective="REPLACE",
            Metadata={"mint-mtime": repr(time.time() - seconds)},
        )

    def leave_temp(self, store, age):
        started = time.time_ns() - int(age * 1e9)
        key = f"{store.prefix}tmp/{started}-dead{os.getpid()}x{time.monotonic_ns()}"
        upload = store_server().client().create_multipart_upload(Bucket=store.bucket, Key=key)
        return f"{key.rsplit('/', 1)[1]}@{upload['UploadId']}"

    def test_layout_and_url(self, store, moto):
        r = store.put_bytes(b"payload")
        keys = [o["Key"] for o in moto.client().list_objects_v2(Bucket=store.bucket)["Contents"]]
        assert keys == [f"some/prefix/{r.id[:2]}/{r.id[2:]}"]
        assert store.url == f"s3://{store.bucket}/some/prefix"

    @pytest.mark.parametrize("region", ["us-east-1", "eu-west-3"])
    def test_presigned_urls_use_signature_version_4_in_the_configured_region(
        self, moto, tmp_path, monkeypatch, region
    ):
        """Issue 35: presigned downloads are signed with SigV4 (AWS4-HMAC-SHA256) in the
        region the standard settings name, expire in minutes, and moto serves them; before,
        they were version 2 (`AWSAccessKeyId`, `Signature`, `Expires`), which AWS regions
        opened since 2014 refuse."""
        from urllib.parse import parse_qs, urlsplit

        from mint.store import S3ObjectStore

        monkeypatch.setenv("AWS_DEFAULT_REGION", region)
        bucket = f"mint-test-{os.urandom(8).hex()}"
        where = {} if region == "us-east-1" else {"LocationConstraint": region}
        moto.client().create_bucket(
            Bucket=bucket, **({"CreateBucketConfiguration": where} if where else {})
        )
        store = S3ObjectStore(bucket, "p", cache_dir=tmp_path / "cache")
        blob = store.put_bytes(b"signed payload").id
        url = store.presigned_url(blob)
        query = parse_qs(urlsplit(url).query)
        assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"], url
        assert query["X-Amz-Credential"][0].endswith(f"/{region}/s3/aws4_request"), url
        assert query["X-Amz-Expires"] == ["300"] and "X-Amz-Signature" in query
        assert not {"AWSAccessKeyId", "Signature", "Expires"} & set(query)
        got = httpx.get(url)
        assert got.status_code == 200 and got.content == b"signed payload"
        tampered = url.replace(f"/p/{blob[:2]}/", f"/p/{blob[:2]}/x")
        assert httpx.get(tampered).status_code >= 400

    def test_large_blobs_go_up_in_parts_and_are_published_once_verified(self, moto, tmp_path):
        from mint.store import S3ObjectStore

        mib = 1024 * 1024
        store = S3ObjectStore(
            moto.new_bucket(),
            cache_dir=tmp_path / "cache",
            part_size=5 * mib,
            multipart_threshold=5 * mib,
        )
        src = tmp_path / "big.bin"
        data = os.urandom(11 * mib + 3)
        src.write_bytes(data)
        r = store.put(src)
        assert r.written and r.size == len(data) and r.id == sha(data)
        assert list(store.iter()) == [r.id] and store.stale_temps(-60) == []
        assert store.local_path(r.id).read_bytes() == data
        assert not store.put(src).written  # checked by S3's own checksum, not downloaded
        with pytest.raises(BlobChanged):
            store.put(src, blob_id=sha(b"other"))
        assert list(store.iter()) == [r.id] and store.stale_temps(-60) == []

    def test_local_path_reads_through_a_bounded_verified_cache(self, store):
        a, b = store.put_bytes(b"a" * 600), store.put_bytes(b"b" * 600)
        store.cache.max_bytes = 1000
        pa = store.local_path(a.id)
        pb = store.local_path(b.id)  # the cache is over its bound: a, used longest ago, goes
        assert pb.read_bytes() == b"b" * 600 and not pa.exists()
        self.corrupt(store, a.id, b"rotten")
        with pytest.raises(BlobCorrupt):
            store.local_path(a.id)  # never cached
        assert not pa.exists() and pb.exists()
        self.corrupt(store, b.id, b"rotten")
        assert store.local_path(b.id).read_bytes() == b"b" * 600  # verified when it came

    def test_settings_are_read_when_the_store_is_created(self, moto, tmp_path, monkeypatch):
        from mint.store import S3ObjectStore, StoreError

        bucket = moto.new_bucket()
        monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # else 5, with backoff between
        store = S3ObjectStore(bucket, cache_dir=tmp_path / "c")
        assert store.client.meta.config.retries["total_max_attempts"] == 1
        monkeypatch.setenv("AWS_ENDPOINT_URL", moto.url)
        monkeypatch.delenv("AWS_MAX_ATTEMPTS")
        with pytest.raises(StoreError):
            store.check_reachable()
        again = S3ObjectStore(bucket, cache_dir=tmp_path / "c")
        again.check_reachable()
        assert again.client.meta.config.retries["total_max_attempts"] == 5
        for bad in ("0", "-1", "five", "2.5"):
            monkeypatch.setenv("AWS_MAX_ATTEMPTS", bad)
            with pytest.raises(StoreError, match="AWS_MAX_ATTEMPTS"):
                S3ObjectStore(bucket, cache_dir=tmp_path / "c")


def store_server():
    from support.s3server import shared_server

    return shared_server()


class _Seen:
    """A ChunkObserver that keeps what it saw, and may refuse in `done`."""

    def __init__(self, refuse: bool = False):
        self.chunks, self.finished, self.refuse = [], None, refuse

    def update(self, chunk):
        self.chunks.append(chunk)

    def done(self, blob_id, size):
        self.finished = (blob_id, size)
        if self.refuse:
            raise RuntimeError("refused")


class TestS3Extras:
    """What the S3 store adds: batched `missing`, `listing`, `delete_many`; observers."""

    @pytest.fixture
    def store(self, tmp_path, moto):
        from mint.store import S3ObjectStore

        mib = 1024 * 1024
        return S3ObjectStore(
            moto.new_bucket(),
            "p",
            cache_dir=tmp_path / "cache",
            part_size=5 * mib,
            multipart_threshold=5 * mib,
        )

    def test_missing_listing_and_delete_many(self, store):
        ids = sorted(store.put_bytes(str(i).encode()).id for i in range(40))
        absent = [sha(b"absent %d" % i) for i in range(30)]
        assert store.missing(ids + absent) == sorted(absent)
        listed = list(store.listing())
        assert [b for b, _ in listed] == ids and all(item["Size"] > 0 for _, item in listed)
        store.local_path(ids[0])
        store.delete_many(ids[:30] + absent[:3])
        assert list(store.iter()) == ids[30:] and store.missing(ids) == ids[:30]
        assert not store.cache.path(ids[0]).exists()

    def test_objects_of_others_under_tmp_are_not_temps(self, store, moto):
        moto.client().put_object(Bucket=store.bucket, Key="p/tmp/notes.txt", Body=b"mine")
        moto.client().put_object(Bucket=store.bucket, Key="p/README", Body=b"mine")
        assert store.stale_temps(-60) == [] and list(store.iter()) == []

    @pytest.mark.parametrize("size", [1000, 11 * 1024 * 1024])
    def test_an_observer_sees_every_byte_and_may_refuse(self, store, tmp_path, size):
        src = tmp_path / "f.bin"
        data = os.urandom(size)
        src.write_bytes(data)
        refusing = _Seen(refuse=True)
        with pytest.raises(RuntimeError):
            store.put(src, observer=refusing)
        assert b"".join(refusing.chunks) == data and refusing.finished == (sha(data), size)
        assert list(store.iter()) == [] and store.stale_temps(-60) == []
        seen = _Seen()
        assert store.put(src, observer=seen).written and b"".join(seen.chunks) == data
        assert list(store.iter()) == [sha(data)]
