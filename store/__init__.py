"""Content-addressed bytes. A blob's id is the sha256 hex of its bytes.

This package knows nothing of mint: it maps ids to bytes and keeps them durable and
verifiable. Who refers to a blob is the metadata's business (see `mint.maintenance`).

- `base`: `BlobId`, `PutResult`, the `ObjectStore` and `ChunkObserver` protocols, `copy_out`,
  `sha256_file`;
- `errors`: `StoreError` and its subclasses;
- `local`: `LocalObjectStore`, files under `.mint/objects/ab/cdef…`;
- `memory`: `MemoryObjectStore`, blobs in a dict;
- `s3`: `S3ObjectStore`, blobs in an S3 bucket (imported on first use: it loads boto3);
- `cache`: `BlobCache`, the local verified cache with a size bound that S3 reads through.
"""

from __future__ import annotations

from mint.store.base import (
    BlobId,
    ChunkObserver,
    ObjectStore,
    PutResult,
    check_blob_id,
    copy_out,
    is_blob_id,
    sha256_file,
)
from mint.store.errors import (
    BlobChanged,
    BlobCorrupt,
    BlobMissing,
    StoreError,
    StoreUnavailable,
)
from mint.store.local import LocalObjectStore
from mint.store.memory import MemoryObjectStore

__all__ = [
    "BlobChanged",
    "BlobCorrupt",
    "BlobId",
    "BlobMissing",
    "ChunkObserver",
    "LocalObjectStore",
    "MemoryObjectStore",
    "ObjectStore",
    "PutResult",
    "S3ObjectStore",
    "StoreError",
    "StoreUnavailable",
    "check_blob_id",
    "copy_out",
    "is_blob_id",
    "sha256_file",
]


def __getattr__(name: str):
    """`S3ObjectStore` on first use, so that importing the store does not load boto3."""
    if name == "S3ObjectStore":
        from mint.store.s3 import S3ObjectStore

        return S3ObjectStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
