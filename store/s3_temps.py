"""The temporary objects of an S3 store, under `PREFIX/tmp/`: where a large blob goes up as a
multipart upload, each part with its SHA-256 checksum, before it is published under its id
by a copy once the whole file hashed to the id (else BlobChanged, the upload is aborted,
nothing is published); and what unfinished uploads and leftover temporary objects remain,
found by their age and removed by gc. A temp's name begins with its start time
(`<start ns>-<random>`, `@UPLOAD` for an unfinished multipart upload), its age taken from it
and from the newest part of an upload."""

from __future__ import annotations

import base64
import hashlib
import re
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO

from mint.store.base import CHUNK, BlobId, PutResult
from mint.store.errors import BlobMissing, StoreUnavailable

_TEMP_NAME = re.compile(r"^([0-9]{1,20})-[0-9a-zA-Z]{1,64}(@[^/\s]+)?$")


class TemporaryObjects:
    """Part of `S3ObjectStore` (its client, bucket, prefix, part size and workers, and its
    `_accept`, `_keep_existing`, `_copy` and `_list`)."""

    @property
    def _tmp_prefix(self) -> str:
        return f"{self.prefix}tmp/"

    def _upload_parts(self, src: BinaryIO, name: str, expected, observer) -> PutResult:
        """A multipart upload to a temporary key, published by a copy once verified."""
        tmp = f"{self._tmp_prefix}{time.time_ns()}-{uuid.uuid4().hex}"
        with self.errors():
            upload = self.client.create_multipart_upload(
                Bucket=self.bucket, Key=tmp, ChecksumAlgorithm="SHA256"
            )["UploadId"]
        try:
            actual, size, parts = self._send_parts(src, tmp, upload, observer)
            self._accept(name, expected, actual, size, observer)
            with self.errors():
                self.client.complete_multipart_upload(
                    Bucket=self.bucket, Key=tmp, UploadId=upload, MultipartUpload={"Parts": parts}
                )
        except BaseException:
            self._abort(tmp, upload)
            raise
        try:
            kept = self._keep_existing(actual) if expected is None else None
            if kept is not None:
                return PutResult(actual, kept, False)
            self._copy(tmp, self._key(actual), size, actual)
            return PutResult(actual, size, True)
        finally:
            with self.errors():
                self.client.delete_object(Bucket=self.bucket, Key=tmp)

    def _send_parts(self, src: BinaryIO, key: str, upload: str, observer):
        """Read SRC in parts, hashing in order, and upload the parts from a few threads.
        Returns (sha256, size, parts for CompleteMultipartUpload)."""
        digest, size, futures = hashlib.sha256(), 0, []
        with ThreadPoolExecutor(self.max_workers) as pool:
            number = 0
            while True:
                part = bytearray()
                while len(part) < self.part_size and (chunk := src.read(CHUNK)):
                    if observer is not None:
                        observer.update(chunk)
                    digest.update(chunk)
                    part += chunk
                if not part and number:
                    break
                number += 1
                size += len(part)
                while sum(not f.done() for f in futures) >= self.max_workers:
                    futures[[f.done() for f in futures].index(False)].result()
                futures.append(pool.submit(self._send_part, key, upload, number, bytes(part)))
                if len(part) < self.part_size:
                    break
            parts = [f.result() for f in futures]
        return BlobId(digest.hexdigest()), size, parts

    def _send_part(self, key: str, upload: str, number: int, data: bytes) -> dict:
        checksum = base64.b64encode(hashlib.sha256(data).digest()).decode()
        with self.errors():
            r = self.client.upload_part(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload,
                PartNumber=number,
                Body=data,
                ChecksumSHA256=checksum,
            )
        return {"ETag": r["ETag"], "PartNumber": number, "ChecksumSHA256": checksum}

    def _abort(self, key: str, upload: str) -> None:
        try:
            with self.errors():
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload)
        except (BlobMissing, StoreUnavailable):
            pass  # gc finds it among the stale temps

    def stale_temps(self, older_than: float) -> list[str]:
        """Unfinished multipart uploads (`NAME@UPLOAD`) and leftover temporary objects
        (`NAME`) under `PREFIX/tmp/`, started more than OLDER_THAN seconds ago (an upload
        whose newest part is younger is still being written)."""
        cutoff = time.time() - older_than
        stale = [n for n, _ in self._list_temps() if _TEMP_NAME.match(n) and _started(n) < cutoff]
        return sorted(n for n in stale if "@" not in n or self._last_part(n) < cutoff)

    def _list_temps(self) -> Iterator[tuple[str, dict]]:
        for key, item in self._list(self._tmp_prefix):
            yield key[len(self._tmp_prefix) :], item
        pages = self.client.get_paginator("list_multipart_uploads")
        with self.errors():
            for page in pages.paginate(Bucket=self.bucket, Prefix=self._tmp_prefix):
                for up in page.get("Uploads", ()):
                    yield f"{up['Key'][len(self._tmp_prefix) :]}@{up['UploadId']}", up

    def _last_part(self, name: str) -> float:
        key, upload = self._temp_key(name)
        try:
            with self.errors():
                parts = self.client.list_parts(Bucket=self.bucket, Key=key, UploadId=upload)
        except BlobMissing:
            return 0.0
        return max((p["LastModified"].timestamp() for p in parts.get("Parts", ())), default=0.0)

    def _temp_key(self, name: str) -> tuple[str, str | None]:
        if not _TEMP_NAME.match(name or ""):
            raise ValueError(f"not a temp name: {name!r}")
        base, _, upload = name.partition("@")
        return self._tmp_prefix + base, upload or None

    def remove_temp(self, name: str) -> None:
        """Abort the upload, or remove the temporary object, NAME (from `stale_temps`);
        nothing happens if it is gone."""
        key, upload = self._temp_key(name)
        if upload is not None:
            self._abort(key, upload)
            return
        with self.errors():
            self.client.delete_object(Bucket=self.bucket, Key=key)


def _started(name: str) -> float:
    """When the temp NAME was started (its name begins with the time in ns); 0 if unknown."""
    m = _TEMP_NAME.match(name)
    return int(m.group(1)) / 1e9 if m else 0.0
