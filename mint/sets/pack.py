"""A set's pack: every member's tensors in one content-addressed blob, so that staging a set
from cold is one read of one file (issue 24; MinT's packed loading).

A pack is a cache. It is built at a set's first stage from the members' weights blobs, each
verified as it is read (a pack is never built from bytes that do not hash to their blob id), kept
in the object store like every blob (its id is the sha256 of its bytes) and named in `set_packs`.
Reading a pack hashes the bytes it read: a pack that does not match its id is refused, removed,
and rebuilt from the members, with a log line. gc keeps a pack while a ref (a line's head, a tag,
a channel, a remote-tracking ref) names its set (`live_packs`); an older version's pack goes, and
is rebuilt if that version is staged again.

Layout: MAGIC (8 bytes), the header's length N (8 bytes, little-endian), the header (canonical
JSON, N bytes), zero padding up to a multiple of ALIGN, then the data. The header:

    {"format": 1, "set": SET_ID, "members": [
        {"commit": ID, "blob": WEIGHTS_BLOB_ID, "offset": O, "length": L, "tensors": [
            {"name": N, "dtype": "F32", "shape": [..], "offset": O, "length": L, "sha256": H}]}]}

Offsets are relative to the data's start. A member's tensors lie together (one slice of the
data holds them all, `offset`/`length` of the member), each starting at a multiple of ALIGN.
Nothing here imports a framework: the runtime turns the slices into tensors.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from mint import schema as s
from mint.commits.adapter import WEIGHTS
from mint.commits.safetensors import MAX_HEADER, parse_header
from mint.errors import InvalidAdapter, InvalidObject, WrongKind
from mint.ids import Kind, canonical_json, utcnow
from mint.repo import Repo
from mint.store import BlobCorrupt, BlobMissing

log = logging.getLogger("mint.packs")

MAGIC = b"mintpak1"
FORMAT = 1
ALIGN = 64
CHUNK = 8 * 1024 * 1024  # bytes read (and hashed) at a time


@dataclass(frozen=True)
class Pack:
    """A verified pack in memory: its id, header, and its data (the bytes after the header)."""

    id: str
    header: dict
    slices: dict  # member commit id -> a buffer of its own holding that member's slice
    rebuilt: bool = False  # built (or rebuilt) by this read rather than read from the store

    def members(self) -> dict[str, dict]:
        """Member commit id -> its entry (blob, offset, length, tensors)."""
        return {m["commit"]: m for m in self.header["members"]}

    def weights_blobs(self) -> set[str]:
        """The weights blobs whose bytes this pack holds (verified when it was built)."""
        return {m["blob"] for m in self.header["members"]}


# --- which set, which members ----------------------------------------------------


def members_of(conn, set_id: str) -> list[tuple[str, str]]:
    """(member commit id, weights blob id) of each distinct member of a set commit, by id."""
    kind = conn.execute(sa.select(s.commits.c.kind).where(s.commits.c.id == set_id)).scalar()
    if kind != Kind.SET:
        raise WrongKind(f"{set_id[:12]} is not a set commit: only a set has a pack")
    m, f = s.set_members.c, s.files.c
    q = (
        sa.select(m.member_id, f.blob_id)
        .select_from(
            s.set_members.outerjoin(
                s.files, sa.and_(f.commit_id == m.member_id, f.path == WEIGHTS)
            )
        )
        .where(m.commit_id == set_id)
        .distinct()
        .order_by(m.member_id)
    )
    rows = [(r.member_id, r.blob_id) for r in conn.execute(q)]
    for member, blob in rows:
        if blob is None:
            raise InvalidAdapter(member, f"commit records no {WEIGHTS}: it cannot be packed")
    return rows


def pack_of(conn, set_id: str) -> str | None:
    """The pack blob recorded for a set commit, if any."""
    q = sa.select(s.set_packs.c.pack_id).where(s.set_packs.c.set_id == set_id)
    return conn.execute(q).scalar()


# --- building --------------------------------------------------------------------


def build(store, set_id: str, members: list[tuple[str, str]]) -> bytes:
    """A pack's bytes, from each member's weights blob read whole and verified against its id
    (BlobCorrupt, BlobMissing); each tensor's digest is taken from those same bytes."""
    entries, chunks, cursor = [], [], 0
    for commit_id, blob_id in members:
        raw = _read_verified(store, blob_id)
        header = _safetensors_header(raw, blob_id)
        start, tensors = cursor, []
        for span in header.tensors:
            gap = -cursor % ALIGN
            if gap:
                chunks.append(bytes(gap))
                cursor += gap
            piece = raw[span.start : span.end]
            chunks.append(piece)
            tensors.append(
                {
                    "name": span.name,
                    "dtype": span.dtype,
                    "shape": list(span.shape),
                    "offset": cursor,
                    "length": span.nbytes,
                    "sha256": hashlib.sha256(piece).hexdigest(),
                }
            )
            cursor += span.nbytes
        entry = {"commit": commit_id, "blob": blob_id, "offset": start, "length": cursor - start}
        entries.append({**entry, "tensors": tensors})
        gap = -cursor % ALIGN
        chunks.append(bytes(gap))
        cursor += gap
    head = canonical_json({"format": FORMAT, "set": set_id, "members": entries})
    prefix = MAGIC + struct.pack("<Q", len(head)) + head
    return b"".join([prefix, bytes(-len(prefix) % ALIGN), *chunks])


def _read_verified(store, blob_id: str) -> memoryview:
    """A blob's bytes in one read, refused unless they hash to its id."""
    data, actual = read_hashed(store.local_path(blob_id))
    if actual != blob_id:
        raise BlobCorrupt(blob_id, actual)
    return memoryview(data)


def _safetensors_header(raw: memoryview, blob_id: str):
    if len(raw) < 8:
        raise InvalidObject(f"weights blob {blob_id[:12]} is too short to be safetensors")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > MAX_HEADER or 8 + n > len(raw):
        raise InvalidObject(f"weights blob {blob_id[:12]} has a malformed safetensors header")
    return parse_header(bytes(raw[: 8 + n]), len(raw), f"blob {blob_id[:12]}")


def read_hashed(path: str | Path) -> tuple[mmap.mmap | bytes, str]:
    """A file's bytes in one private, writable buffer, and their sha256: one sequential pass
    over the file, each CHUNK hashed while the next is read (the disk and the hash overlap).
    The buffer is anonymous memory: no zero-filling pass before the read."""
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as f, ThreadPoolExecutor(1) as hasher:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return b"", digest.hexdigest()
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        buf = mmap.mmap(-1, size)
        view, got, hashing = memoryview(buf), 0, None
        while got < size:
            n = f.readinto(view[got : got + CHUNK])
            if not n:
                raise BlobCorrupt(Path(path).name, "a file that shrank while it was read")
            if hashing is not None:
                hashing.result()  # in order: one chunk at a time
            hashing = hasher.submit(digest.update, view[got : got + n])
            got += n
        hashing.result()
    return buf, digest.hexdigest()


# --- reading ---------------------------------------------------------------------


def read(repo: Repo, set_id: str) -> Pack:
    """The set's pack, verified: read in one read and hashed; built (or rebuilt, when the stored
    one is missing or corrupt) from the members' verified blobs and recorded."""
    with repo.db.read() as conn:
        members = members_of(conn, set_id)
        pack_id = pack_of(conn, set_id)
    if pack_id is not None:
        try:
            actual, header, slices = read_split(repo.store.local_path(pack_id), set_id)
        except (BlobMissing, FileNotFoundError):
            actual = None
        if actual == pack_id and header is not None:
            return Pack(pack_id, header, slices)
        if actual is not None:
            log.warning(
                "pack %s of set %s is corrupt (its bytes hash to %s): removed, rebuilding it "
                "from the set's members",
                pack_id[:12],
                set_id[:12],
                actual[:12],
            )
            repo.store.delete(pack_id)
    data = build(repo.store, set_id, members)
    pack_id = record(repo, set_id, data)
    return _parse(pack_id, data, set_id)


def record(repo: Repo, set_id: str, data: bytes) -> str:
    """Store a pack's bytes and name it as the set's pack (replacing another). Returns its id."""
    put = repo.store.put_bytes(data)
    for attempt in range(2):  # two servers recording the same set's pack at once: one wins
        try:
            with repo.db.write() as conn:
                repo.db.guard_blobs(conn, exclusive=False)  # gc deletes nothing meanwhile
                if not repo.store.has(put.id):  # gc took it between the put and the lock
                    repo.store.put_bytes(data)
                conn.execute(s.set_packs.delete().where(s.set_packs.c.set_id == set_id))
                row = dict(set_id=set_id, pack_id=put.id, size=len(data), built_at=utcnow())
                conn.execute(s.set_packs.insert().values(**row))
            break
        except sa.exc.IntegrityError:
            if attempt:
                raise
    return put.id


def _parse(pack_id: str, data: bytes, set_id: str) -> Pack:
    """The pack just built from DATA, each member's slice copied into a buffer of its own."""
    laid = _layout(data, len(data), set_id)
    if laid is None:  # pragma: no cover - `build` writes what `_layout` reads
        raise InvalidObject(f"pack {pack_id[:12]} is not a pack of set {set_id[:12]}")
    header, start = laid
    view = memoryview(data)
    slices = {
        m["commit"]: bytearray(view[start + m["offset"] : start + m["offset"] + m["length"]])
        for m in header["members"]
    }
    return Pack(pack_id, header, slices, rebuilt=True)


def _layout(head: bytes, size: int, set_id: str) -> tuple[dict, int] | None:
    """(header, where the data starts) read from the first bytes HEAD of a SIZE-byte pack of
    SET_ID; None when they are not that (or the header runs past HEAD). Not trusted until the
    whole file hashes to the pack's id: it only says where to read each member's slice."""
    if len(head) < 16 or bytes(head[:8]) != MAGIC:
        return None
    (n,) = struct.unpack("<Q", head[8:16])
    if 16 + n > len(head):
        return None
    try:
        header = json.loads(bytes(head[16 : 16 + n]))
    except ValueError:
        return None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        return None
    start, end = 16 + n + (-(16 + n) % ALIGN), 0
    try:
        for m in header["members"]:
            offset, length = m["offset"], m["length"]
            if not (isinstance(offset, int) and isinstance(length, int)) or length < 0:
                return None
            if offset < end or start + offset + length > size:
                return None
            end = offset + length
    except (KeyError, TypeError):
        return None
    return (header, start) if header.get("set") == set_id else None


class _HashingReader:
    """Reads a file front to back into the buffers it is given, hashing each chunk in a thread
    while the next is read (in order, one chunk at a time)."""

    def __init__(self, f, hasher: ThreadPoolExecutor):
        self.f, self.hasher, self.digest = f, hasher, hashlib.sha256()
        self.pending = None

    def fill(self, view: memoryview) -> bool:
        """Read len(VIEW) bytes into VIEW; False when the file ends first (it shrank)."""
        got = 0
        while got < len(view):
            n = self.f.readinto(view[got : got + CHUNK])
            if not n:
                return False
            if self.pending is not None:
                self.pending.result()
            self.pending = self.hasher.submit(self.digest.update, view[got : got + n])
            got += n
        return True

    def hexdigest(self) -> str:
        if self.pending is not None:
            self.pending.result()
        return self.digest.hexdigest()


def read_split(path: str | Path, set_id: str) -> tuple[str, dict | None, dict]:
    """(sha256, header, member commit id -> its slice in a buffer of its own) of a pack file,
    in one sequential pass: the header, then each member's slice straight into its own
    anonymous memory (no copy of the whole pack), each chunk hashed while the next is read.
    The header is None (and no slice kept) when the bytes are not a pack of SET_ID."""
    with open(path, "rb", buffering=0) as f, ThreadPoolExecutor(1) as hasher:
        size = os.fstat(f.fileno()).st_size
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        reader = _HashingReader(f, hasher)
        head = bytearray(min(size, 16))  # the magic and the header's length
        reader.fill(memoryview(head))
        if len(head) == 16 and head[:8] == MAGIC:  # then the header and its padding
            n = min(struct.unpack("<Q", head[8:16])[0], MAX_HEADER)
            more = bytearray(min(size, 16 + n + (-(16 + n) % ALIGN)) - 16)
            reader.fill(memoryview(more))
            head += more
        laid = _layout(head, size, set_id)
        slices, pos = {}, len(head)
        for m in laid[0]["members"] if laid else []:
            at = laid[1] + m["offset"]
            reader.fill(memoryview(bytearray(max(0, at - pos))))  # padding
            buf = mmap.mmap(-1, m["length"]) if m["length"] else bytearray()
            reader.fill(memoryview(buf))
            slices[m["commit"]], pos = buf, at + m["length"]
        rest = bytearray(CHUNK)
        while pos < size:  # the padding after the last member, or a file that is no pack
            n = min(CHUNK, size - pos)
            if not reader.fill(memoryview(rest)[:n]):
                break
            pos += n
        return reader.hexdigest(), (laid[0] if laid else None), slices if laid else {}


# --- what gc keeps ---------------------------------------------------------------


def _named_sets():
    """The commits some ref names: line heads, tags and channels, remote-tracking refs."""
    return sa.union(
        sa.select(s.lines.c.head.label("id")).where(s.lines.c.head.is_not(None)),
        sa.select(s.refs.c.target.label("id")),
        sa.select(s.remote_refs.c.target.label("id")),
    ).subquery()


def live_packs(conn, among: list[str] | None = None) -> set[str]:
    """Pack blobs whose set commit a ref names (of AMONG, when given): what gc keeps."""
    named = _named_sets()
    q = sa.select(s.set_packs.c.pack_id).where(s.set_packs.c.set_id.in_(sa.select(named.c.id)))
    if among is not None:
        q = q.where(s.set_packs.c.pack_id.in_(among))
    return {r[0] for r in conn.execute(q.distinct())}


def forget(conn, blob_ids: list[str]) -> None:
    """Drop the records of packs whose blobs gc deletes (in the transaction that deletes)."""
    if blob_ids:
        conn.execute(s.set_packs.delete().where(s.set_packs.c.pack_id.in_(blob_ids)))


def recorded_packs(conn) -> set[str]:
    """Every recorded pack blob (fsck counts them as referenced, not as strays)."""
    return {r[0] for r in conn.execute(sa.select(s.set_packs.c.pack_id).distinct())}
