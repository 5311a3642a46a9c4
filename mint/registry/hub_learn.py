"""What an LFS upload learns of its bytes in the pass that stores them (issue 37): when they
are a safetensors file, its header and each tensor's hash, its values checked for NaN and
infinity (`mint.commits.safetensors.TensorPass`, on a thread a few chunks behind, as
`mint commit`'s own pass runs it). Kept in `hub_uploads` by blob id, it is what the commit
that names the blob finds in mint's stat cache for the file laid out from it
(`hub_commit.laid_out`): that commit then reads the weights no more than `mint commit` reads a
file its stat cache knows, and checks everything else as it always does.

A shortcut only: bytes that are no safetensors file, or that the pass refuses, leave nothing
behind, and the commit reads them whole (and refuses them, with its own error).
"""

from __future__ import annotations

import struct
from concurrent.futures import ThreadPoolExecutor

import sqlalchemy as sa

from mint import schema as s
from mint.commits.ahead import Behind
from mint.commits.safetensors import MAX_HEADER, TensorPass, parse_header
from mint.commits.statcache import Known
from mint.db import insert_new
from mint.errors import MintError
from mint.ids import utcnow

WHERE = "<upload>"  # what a refusal would name as the file: never shown (it is dropped)


class Learning:
    """A chunk observer of an upload of SIZE bytes; `known` is what it learnt (or None)."""

    def __init__(self, size: int):
        self.size, self.buf = size, bytearray()
        self.behind: Behind | None = None
        self.pool: ThreadPoolExecutor | None = None
        self.header = None
        self.failed = False
        self.known: Known | None = None

    def update(self, chunk: bytes) -> None:
        if self.failed:
            return
        try:
            if self.behind is None:
                chunk = self._start(chunk)
                if chunk is None:
                    return
            self.behind.update(chunk)
        except MintError:
            self._give_up()

    def _start(self, chunk: bytes) -> bytes | None:
        """Buffer the first bytes until the header is whole; then the tensor pass starts on
        them (returned, to be fed), or this upload is no safetensors file."""
        self.buf += chunk
        if len(self.buf) < 8:
            return None
        (n,) = struct.unpack("<Q", self.buf[:8])
        if n > MAX_HEADER or 8 + n > self.size:
            self._give_up()
            return None
        if len(self.buf) < 8 + n:
            return None
        self.header = parse_header(bytes(self.buf[: 8 + n]), self.size, WHERE)
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="mint-upload-tensors")
        self.behind = Behind(TensorPass(WHERE, self.header), self.pool)
        data, self.buf = bytes(self.buf), bytearray()
        return data

    def done(self, blob_id: str, size: int) -> None:
        if self.failed or self.behind is None:
            return self._give_up()
        try:
            self.behind.done(blob_id, size)
            self.known = Known(blob_id, self.header.raw, self.behind.result)
        except MintError:
            self.known = None
        finally:
            self._close()

    def abandon(self) -> None:
        """Stop (the upload failed): the thread goes, nothing is learnt."""
        self._give_up()

    def _give_up(self) -> None:
        self.failed, self.buf = True, bytearray()
        if self.behind is not None:
            for future in self.behind.pending:
                future.cancel()
        self._close()

    def _close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None


def keep(conn, known: Known) -> None:
    """Record what an upload learnt of blob KNOWN.blob (once: a blob's bytes never change)."""
    row = dict(blob_id=known.blob, head=known.head, tensors=known.tensors, at=utcnow())
    insert_new(conn, s.hub_uploads, row)


def learnt(conn, blob_ids: list[str]) -> dict[str, Known]:
    """What uploads learnt of BLOB_IDS, by id."""
    if not blob_ids:
        return {}
    h = s.hub_uploads.c
    q = sa.select(h.blob_id, h.head, h.tensors).where(h.blob_id.in_(sorted(set(blob_ids))))
    return {r.blob_id: Known(r.blob_id, bytes(r.head), dict(r.tensors)) for r in conn.execute(q)}
