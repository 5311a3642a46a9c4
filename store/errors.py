"""The store's errors. The store imports nothing of mint, so they have a base of their own;
`mint.errors` re-exports them. Each also inherits the builtin that fits and carries its data."""

from __future__ import annotations


class StoreError(Exception):
    """Base of the store's errors."""


class BlobMissing(StoreError, FileNotFoundError):
    """A blob that should be stored is not."""

    def __init__(self, blob_id: str):
        super().__init__(f"blob {blob_id[:12]} is missing from the object store")
        self.blob_id = blob_id


class BlobCorrupt(StoreError, ValueError):
    """A blob's bytes do not hash to its id."""

    def __init__(self, blob_id: str, actual: str):
        super().__init__(f"blob {blob_id[:12]} is corrupt: its bytes hash to {actual[:12]}")
        self.blob_id, self.actual = blob_id, actual


class BlobChanged(StoreError, ValueError):
    """A file being stored did not hash to the id it was indexed under: it changed meanwhile."""

    def __init__(self, path: str, expected: str, actual: str):
        super().__init__(
            f"{path} changed while it was being stored (indexed as {expected[:12]}, "
            f"copied bytes hash to {actual[:12]})"
        )
        self.path, self.expected, self.actual = path, expected, actual


class StoreUnavailable(StoreError, OSError):
    """The store's service (S3) refused a request or could not be reached."""
