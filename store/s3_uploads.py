"""Uploads that go straight to the bucket: a presigned PUT of a temporary object, published as
a blob only once the store has read it back and hashed it (the Hub's LFS upload on an S3
store, issue 37). Nothing a client sends there is a blob until then; an upload never
published is a stale temporary object, which gc removes."""

from __future__ import annotations

import contextlib
import hashlib

from mint.store.base import CHUNK, BlobId, PutResult, check_blob_id
from mint.store.errors import BlobChanged, BlobMissing, StoreUnavailable


class PresignedUploads:
    """Part of `S3ObjectStore` (its client, bucket and temporary keys)."""

    def presigned_put(self, name: str, expires: int = 300) -> str:
        """A URL that PUTs bytes to the temporary object NAME (a temp name: TIME_NS-WORD)
        without credentials for EXPIRES seconds (what the Hub's LFS upload sends a client to).
        Nothing there is a blob until `publish_temp` hashed it."""
        key, upload = self._temp_key(name)
        if upload is not None:
            raise ValueError(f"not a plain temp name: {name!r}")
        params = {"Bucket": self.bucket, "Key": key}
        return self.client.generate_presigned_url("put_object", Params=params, ExpiresIn=expires)

    def publish_temp(self, name: str, blob_id: str, size: int) -> PutResult:
        """Publish the temporary object NAME as blob BLOB_ID once its bytes, read back and
        hashed here, are BLOB_ID's and SIZE long (BlobChanged if not); the temporary object
        is removed either way. BlobMissing when nothing was uploaded there."""
        blob_id = check_blob_id(blob_id)
        key, _ = self._temp_key(name)
        try:
            digest, got = hashlib.sha256(), 0
            with self.errors(blob_id):
                body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
            with body:
                while chunk := body.read(CHUNK):
                    digest.update(chunk)
                    got += len(chunk)
            actual = BlobId(digest.hexdigest())
            if actual != blob_id or got != size:
                raise BlobChanged(name, blob_id, actual)
            kept = self._keep_existing(blob_id)
            if kept is not None:
                return PutResult(blob_id, kept, False)
            self._copy(key, self._key(blob_id), size, blob_id)
            return PutResult(blob_id, size, True)
        finally:
            with contextlib.suppress(BlobMissing, StoreUnavailable), self.errors():
                self.client.delete_object(Bucket=self.bucket, Key=key)
