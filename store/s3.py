"""`S3ObjectStore`: blobs as objects `PREFIX/ab/cdef…` in an S3 bucket.

- **Writing**: the bytes are hashed as they are sent. A blob up to `multipart_threshold`
  goes up in one `PutObject` with its SHA-256 checksum (S3 refuses bytes that do not match
  it), after the id was checked; a larger one goes up as a multipart upload to a temporary
  key `PREFIX/tmp/<start ns>-<random>`, each part with its SHA-256 checksum, and is copied to
  its id's key only once the whole file hashed to the id (else BlobChanged, the upload is
  aborted, nothing is published: `s3_temps`). The copy asks S3 for a SHA-256 of the published
  object.
- **Existing blobs**: a put of a stored blob checks it, touches it and writes nothing. The
  check trusts a full-object SHA-256 checksum kept by S3 that equals the id; otherwise it
  downloads and re-hashes the object. A corrupt object is replaced.
- **Times**: `touch` copies the object onto itself with a new `mint-mtime` metadata entry
  (seconds since the epoch, from this machine's clock, as gc compares); `mtime` reads it, or
  the object's Last-Modified when it has none.
- **Temps**: unfinished multipart uploads and leftover temporary objects under `PREFIX/tmp/`;
  their age comes from the start time in their name (and the newest part of an upload)
  (`s3_temps`). A presigned PUT goes to a temporary object too (`s3_uploads`).
- **Reading**: `open` streams from S3 (unverified, as for every store: see `copy_out`);
  `local_path` hands out a file of a local verified cache with a size bound (`BlobCache`).

Credentials, region and endpoint come from the standard AWS settings (`AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, `AWS_MAX_ATTEMPTS`, …), read when the store is created. boto3 is
imported then too.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from mint.store.base import CHUNK, BlobId, PutResult, check_blob_id, is_blob_id
from mint.store.cache import DEFAULT_CACHE_BYTES, BlobCache
from mint.store.errors import BlobChanged, BlobCorrupt, BlobMissing, StoreUnavailable
from mint.store.s3_temps import TemporaryObjects
from mint.store.s3_uploads import PresignedUploads

if TYPE_CHECKING:
    from mint.store.base import ChunkObserver

MIB = 1024 * 1024
COPY_LIMIT = 5 * 1024**3  # the largest object one CopyObject may copy
MTIME_KEY = "mint-mtime"
LIST_FROM = 4  # `missing` lists a folder rather than ask for this many of its ids one by one
_MISSING_CODES = {"404", "NoSuchKey", "NotFound", "NoSuchUpload"}


def parse_s3_url(url: str) -> tuple[str, str]:
    """`s3://BUCKET/PREFIX` as (bucket, prefix); ValueError for anything else."""
    m = re.fullmatch(r"s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])(/.*)?", url)
    if not m:
        raise ValueError(f"not an S3 store URL (s3://BUCKET/PREFIX): {url!r}")
    prefix = (m.group(2) or "").strip("/")
    if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
        raise ValueError(f"not an S3 key prefix: {prefix!r}")
    return m.group(1), prefix


def _b64(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode()


def max_attempts() -> int:
    """Attempts per request: AWS_MAX_ATTEMPTS where set (a whole number, 1 or more), else 5."""
    value = os.environ.get("AWS_MAX_ATTEMPTS", "").strip()
    if not value:
        return 5
    if not value.isdigit() or int(value) < 1:
        raise StoreUnavailable(f"AWS_MAX_ATTEMPTS is {value!r}: it must be a whole number >= 1")
    return int(value)


class S3ObjectStore(TemporaryObjects, PresignedUploads):
    """Content-addressed blobs in `s3://BUCKET/PREFIX/`, with a local verified cache."""

    def errors(self, blob_id: str | None = None):
        return _errors(blob_id)  # botocore's errors as the store's (for s3_temps, s3_uploads)

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        cache_dir: str | os.PathLike,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        part_size: int = 16 * MIB,
        multipart_threshold: int = 64 * MIB,
        max_workers: int = 4,
    ):
        import boto3
        from botocore.config import Config

        if part_size < 5 * MIB:
            raise ValueError("S3 parts are 5 MiB at least")
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.cache = BlobCache(cache_dir, cache_bytes)
        self.part_size, self.multipart_threshold = part_size, multipart_threshold
        self.max_workers = max_workers
        config = Config(
            # Five attempts, not botocore's three: a server error (500, 503) is retried with
            # backoff, and a blob's concurrent puts each copy it onto itself to refresh its
            # mtime; moto, the S3 server the tests run, answered three such copies in a row
            # with 500 once (tests/test_store.py, sixteen concurrent puts of one blob).
            # AWS_MAX_ATTEMPTS, where set, is the user's choice, as for any AWS client.
            retries={"mode": "standard", "total_max_attempts": max_attempts()},
            max_pool_connections=max(10, 4 * max_workers),
            request_checksum_calculation="when_required",
            signature_version="s3v4",  # SigV4 URLs too: v2 is deprecated, refused since 2014
        )
        self.client = boto3.session.Session().client("s3", config=config)

    @classmethod
    def from_url(cls, url: str, **kwargs) -> S3ObjectStore:
        """A store for `s3://BUCKET/PREFIX` (KWARGS as for the constructor)."""
        bucket, prefix = parse_s3_url(url)
        return cls(bucket, prefix, **kwargs)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def __repr__(self) -> str:
        return f"S3ObjectStore({self.url!r})"

    def _key(self, blob_id: str) -> str:
        check_blob_id(blob_id)
        return f"{self.prefix}{blob_id[:2]}/{blob_id[2:]}"

    def check_reachable(self) -> None:
        """Raise StoreUnavailable unless the bucket answers."""
        try:
            with _errors():
                self.client.head_bucket(Bucket=self.bucket)
        except BlobMissing:
            raise StoreUnavailable(f"S3 has no bucket {self.bucket!r}") from None

    # --- writing ---------------------------------------------------------------

    def put(
        self,
        path: str | os.PathLike,
        *,
        blob_id: str | None = None,
        observer: ChunkObserver | None = None,
    ) -> PutResult:
        """Store the file at PATH, hashing the bytes as they are sent (see ObjectStore)."""
        if blob_id is not None:
            blob_id = check_blob_id(blob_id)
            kept = self._keep_existing(blob_id)
            if kept is not None:
                return PutResult(blob_id, kept, False)
        with open(path, "rb") as src:
            return self._upload(src, os.fstat(src.fileno()).st_size, str(path), blob_id, observer)

    def put_bytes(self, data: bytes) -> PutResult:
        """Store DATA (see ObjectStore.put)."""
        blob_id = BlobId(hashlib.sha256(data).hexdigest())
        kept = self._keep_existing(blob_id)
        if kept is not None:
            return PutResult(blob_id, kept, False)
        return self._upload(io.BytesIO(data), len(data), "<bytes>", blob_id, None)

    def _upload(self, src: BinaryIO, size: int, name: str, expected, observer) -> PutResult:
        if size > self.multipart_threshold:
            return self._upload_parts(src, name, expected, observer)
        digest, buf = hashlib.sha256(), bytearray()
        while chunk := src.read(CHUNK):
            if observer is not None:
                observer.update(chunk)
            digest.update(chunk)
            buf += chunk
        actual = BlobId(digest.hexdigest())
        self._accept(name, expected, actual, len(buf), observer)
        if expected is None:
            kept = self._keep_existing(actual)
            if kept is not None:
                return PutResult(actual, kept, False)
        with _errors():
            self.client.put_object(
                Bucket=self.bucket,
                Key=self._key(actual),
                Body=bytes(buf),
                ChecksumSHA256=_b64(actual),
                Metadata={MTIME_KEY: repr(time.time())},
            )
        return PutResult(actual, len(buf), True)

    @staticmethod
    def _accept(name: str, expected, actual: BlobId, size: int, observer) -> None:
        """Raise unless the bytes sent are the ones wanted: the caller's id, the observer."""
        if expected is not None and actual != expected:
            raise BlobChanged(name, expected, actual)
        if observer is not None:
            observer.done(actual, size)

    def _copy(self, src: str, dest: str, size: int, blob_id: str | None = None) -> None:
        """Copy SRC to DEST with a fresh mtime, asking S3 for a SHA-256 of the copy; with
        BLOB_ID, raise BlobCorrupt if S3's checksum of the copy is another."""
        args = {
            "MetadataDirective": "REPLACE",
            "Metadata": {MTIME_KEY: repr(time.time())},
            "ChecksumAlgorithm": "SHA256",
        }
        source = {"Bucket": self.bucket, "Key": src}
        with _errors():
            if size > COPY_LIMIT:
                self.client.copy(source, self.bucket, dest, ExtraArgs=args)
                return
            r = self.client.copy_object(Bucket=self.bucket, Key=dest, CopySource=source, **args)
        got = r.get("CopyObjectResult", {}).get("ChecksumSHA256")
        if blob_id is not None and got and got != _b64(blob_id):
            actual = base64.b64decode(got).hex()
            raise BlobCorrupt(blob_id, actual)

    def _keep_existing(self, blob_id: BlobId) -> int | None:
        """The size of a good stored copy, touched so gc spares it; None when the blob is
        absent or corrupt (then the caller writes it)."""
        try:
            head = self._head(blob_id, checksum=True)
            if head.get("ChecksumSHA256") != _b64(blob_id):
                self.verify(blob_id)
            self.touch(blob_id)
        except (BlobMissing, BlobCorrupt):
            return None
        return head["ContentLength"]

    # --- reading ---------------------------------------------------------------

    def _head(self, blob_id: str, *, checksum: bool = False) -> dict:
        key = self._key(blob_id)
        extra = {"ChecksumMode": "ENABLED"} if checksum else {}
        with _errors(blob_id):
            return self.client.head_object(Bucket=self.bucket, Key=key, **extra)

    def open(self, blob_id: str) -> BinaryIO:
        """A file object that streams the blob's bytes from S3."""
        key = self._key(blob_id)
        with _errors(blob_id):
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"]

    def _chunks(self, blob_id: str) -> Iterator[bytes]:
        with self.open(blob_id) as body:
            while chunk := body.read(CHUNK):
                yield chunk

    def local_path(self, blob_id: str) -> Path:
        """A read-only file of the local cache with the blob's bytes, verified when it was
        downloaded. BlobMissing when the bucket no longer holds the blob."""
        self._head(blob_id)
        path = self.cache.get(blob_id)
        return path if path is not None else self.cache.fill(blob_id, self._chunks(blob_id))

    def presigned_url(self, blob_id: str, expires: int = 300) -> str:
        """A URL that GETs the blob from S3 without credentials for EXPIRES seconds (made
        here, no request sent; the client verifies what it downloads)."""
        params = {"Bucket": self.bucket, "Key": self._key(blob_id)}
        return self.client.generate_presigned_url("get_object", Params=params, ExpiresIn=expires)

    def has(self, blob_id: str) -> bool:
        """Whether the blob is stored."""
        try:
            self._head(blob_id)
            return True
        except BlobMissing:
            return False

    def verify(self, blob_id: str) -> None:
        """Download and re-hash the blob; raise BlobMissing or BlobCorrupt."""
        digest = hashlib.sha256()
        for chunk in self._chunks(blob_id):
            digest.update(chunk)
        if digest.hexdigest() != blob_id:
            raise BlobCorrupt(blob_id, digest.hexdigest())

    def size(self, blob_id: str) -> int:
        """The blob's size in bytes."""
        return self._head(blob_id)["ContentLength"]

    def mtime(self, blob_id: str) -> float:
        """When the blob was last written or touched (seconds since the epoch)."""
        head = self._head(blob_id)
        stamp = head.get("Metadata", {}).get(MTIME_KEY)
        try:
            return float(stamp)
        except (TypeError, ValueError):
            return head["LastModified"].timestamp()

    def iter(self) -> Iterator[BlobId]:
        """Every stored blob id, in order (S3 lists keys in order)."""
        for blob_id, _ in self.listing():
            yield blob_id

    def listing(self, folder: str = "") -> Iterator[tuple[BlobId, dict]]:
        """(id, S3's listing entry: `Size`, `LastModified`, …) of every stored blob, in
        order, from listings of 1000 keys a request; FOLDER (two hex digits) narrows it."""
        for key, item in self._list(self.prefix + (f"{folder}/" if folder else "")):
            name = key[len(self.prefix) :]
            if name[2:3] == "/" and is_blob_id(name[:2] + name[3:]):
                yield BlobId(name[:2] + name[3:]), item

    def missing(self, blob_ids: Iterable[str]) -> list[BlobId]:
        """The ids among BLOB_IDS that are not stored, asked in batches: one listing for
        each two-hex-digit folder that holds several of them, a HEAD for the others."""
        groups: dict[str, list[BlobId]] = {}
        for blob_id in sorted({check_blob_id(b) for b in blob_ids}):
            groups.setdefault(blob_id[:2], []).append(blob_id)
        gone = []
        for folder, ids in groups.items():
            if len(ids) >= LIST_FROM:
                present = {b for b, _ in self.listing(folder)}
                gone += [b for b in ids if b not in present]
            else:
                gone += [b for b in ids if not self.has(b)]
        return gone

    def _list(self, prefix: str) -> Iterator[tuple[str, dict]]:
        pages = self.client.get_paginator("list_objects_v2")
        with _errors():
            for page in pages.paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Contents", ()):
                    yield item["Key"], item

    # --- upkeep ----------------------------------------------------------------

    def touch(self, blob_id: str) -> None:
        """Give the blob a new mtime (a copy onto itself): gc's grace period covers it anew."""
        key = self._key(blob_id)
        try:
            self._copy(key, key, self._head(blob_id)["ContentLength"])
        except BlobMissing:
            raise BlobMissing(blob_id) from None  # deleted meanwhile

    def delete(self, blob_id: str) -> None:
        """Remove the blob (and its cached copy); nothing happens if it is absent."""
        key = self._key(blob_id)
        self.cache.drop(blob_id)
        with _errors():
            self.client.delete_object(Bucket=self.bucket, Key=key)

    def delete_many(self, blob_ids: Iterable[str]) -> None:
        """Remove many blobs, 1000 to a request; absent ones are no error."""
        ids = sorted({check_blob_id(b) for b in blob_ids})
        for start in range(0, len(ids), 1000):
            batch = ids[start : start + 1000]
            for blob_id in batch:
                self.cache.drop(blob_id)
            objects = [{"Key": self._key(b)} for b in batch]
            with _errors():
                r = self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True}
                )
            if r.get("Errors"):
                raise StoreUnavailable(f"S3 kept {len(r['Errors'])} objects: {r['Errors'][0]}")


class _errors:
    """Turn botocore's errors into the store's: BlobMissing for a missing BLOB_ID,
    StoreUnavailable for the rest."""

    def __init__(self, blob_id: str | None = None):
        self.blob_id = blob_id

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None:
            return False
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(exc, ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _MISSING_CODES:
                raise BlobMissing(self.blob_id or "") from None
            raise StoreUnavailable(f"S3 refused the request: {exc}") from exc
        if isinstance(exc, BotoCoreError):
            raise StoreUnavailable(f"S3 could not be reached: {exc}") from exc
        return False
