"""Commit at the speed of the disk: one pass over the bytes, and a stat cache (as git's index)
that lets an unchanged folder be committed again without reading any of it.

What is read is watched through Python's audit hook: every `open()` of a file, by builtins,
io, os or numpy, raises an "open" audit event before it happens."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import struct
import sys
import time
import zlib

import pytest

from mint import api
from mint.commits.safetensors import TensorPass, read_header
from mint.commits.statcache import FILENAME, FileStat, Known, StatCache, tick_ns
from mint.errors import InvalidSafetensors
from mint.store import BlobChanged, LocalObjectStore, MemoryObjectStore
from mint.store.base import CHUNK

from conftest import snapshot

WEIGHTS = "adapter_model.safetensors"
_watched: list[str] = []  # folders whose opens are recorded
_opened: list[str] = []


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _watched and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.fsdecode(args[0])
        if any(path.startswith(folder) for folder in _watched):
            _opened.append(path)


sys.addaudithook(_audit)


class reads:
    """Records every file opened under FOLDER while the block runs."""

    def __init__(self, folder):
        self.folder = os.fspath(folder)

    def __enter__(self) -> list[str]:
        _opened.clear()
        _watched.append(self.folder)
        return _opened

    def __exit__(self, *exc) -> None:
        _watched.remove(self.folder)


def settle(folder, but=None) -> None:
    """Wait until the files' times (but BUT's) are old enough for the stat cache to trust
    them: one time stamp's granularity (on most file systems, about 10 ms)."""
    stats = [FileStat.of(p.lstat()) for p in folder.rglob("*") if p.is_file() and p != but]
    trusted = max(max(s.mtime_ns, s.ctime_ns) + s.racy_window_ns for s in stats)
    while time.time_ns() <= trusted:
        time.sleep((trusted - time.time_ns()) / 1e9 + 0.001)


@pytest.fixture
def local(models, tmp_path):
    """A repository on SQLite with the tiny base, and a private copy of adapter a1."""
    repo, _ = api.init(tmp_path / "repo")
    api.base_add(repo, "tiny-llama", models["base"])
    folder = tmp_path / "adapter"
    shutil.copytree(models["a1"], folder)
    yield repo, folder
    repo.close()


def commit(repo, folder, line="chat", message="m"):
    return api.commit(repo, line, folder, message, author="test")


def test_unchanged_recommit_reads_no_file(local):
    repo, folder = local
    settle(folder)
    with reads(folder) as opened:
        first = commit(repo, folder)
    assert first.created  # the first commit reads every file (and the weights' header)
    assert set(opened) == {str(p) for p in folder.iterdir()}
    with reads(folder) as opened:
        again = commit(repo, folder)
        other = commit(repo, folder, line="copy")  # the blobs are in the store already
    assert not again.created and again.id == first.id
    assert other.created and other.bytes_written == 0
    assert opened == []
    assert (repo.mint_dir / FILENAME).exists()


def test_unchanged_recommit_right_after_the_commit_reads_no_file(local):
    """Files written a moment before the commit (as training leaves them) are cached by it:
    only a file stamped within one tick of the reading is racy, not every file just written."""
    repo, folder = local
    shutil.copytree(folder, folder.parent / "fresh")
    fresh = folder.parent / "fresh"
    settle(fresh)  # one time stamp's tick, not seconds
    first = commit(repo, fresh)
    with reads(fresh) as opened:
        again = commit(repo, fresh)
    assert first.created and not again.created and again.id == first.id
    assert opened == []


def test_a_file_changed_in_place_with_its_mtime_restored_is_caught(local):
    """Right after the commit, within the same second: the size and the mtime are as they
    were, and the ctime, which no tool can set, tells."""
    repo, folder = local
    first = commit(repo, folder)
    weights = folder / WEIGHTS
    before = weights.stat()
    _flip_last_value(weights)
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))  # size and mtime as before
    after = weights.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert after.st_ctime_ns != before.st_ctime_ns
    changed = commit(repo, folder)
    assert changed.created and changed.parents == [first.id]
    assert _blob(repo, changed.id) == hashlib.sha256(weights.read_bytes()).hexdigest()


def test_a_file_replaced_by_another_inode_is_caught(local):
    repo, folder = local
    settle(folder)
    commit(repo, folder)
    weights = folder / WEIGHTS
    copy = folder.parent / "other.safetensors"
    shutil.copy2(weights, copy)
    _flip_last_value(copy)
    shutil.copystat(weights, copy)  # the same mtime
    os.replace(copy, weights)
    assert commit(repo, folder).created


def test_a_racy_entry_is_not_trusted(local):
    """A file stamped no earlier than the reading (here a second ahead, as a write within the
    reading's tick, or a clock running ahead, leaves it) is read again by the next commit;
    the others are not."""
    repo, folder = local
    readme = folder / "README.md"
    readme.write_text("just written\n")
    ahead = time.time_ns() + 1_000_000_000
    os.utime(readme, ns=(ahead, ahead))
    settle(folder, but=readme)
    commit(repo, folder)
    with reads(folder) as opened:
        assert not commit(repo, folder).created
    assert opened == [str(readme)]


@pytest.mark.parametrize(
    "stamp,granule",
    [
        (1_700_000_000_123_456_789, 1),  # nanoseconds (ext4, xfs, btrfs, tmpfs)
        (1_700_000_000_123_456_700, 100),  # NTFS keeps 100 ns
        (1_700_000_000_120_000_000, 10_000_000),  # exFAT keeps 10 ms
        (1_700_000_001_000_000_000, 2_000_000_000),  # whole seconds: FAT keeps even ones
    ],
)
def test_racy_means_within_the_granularity_of_the_reading(stamp, granule):
    st = FileStat(10, stamp, stamp, 1, 1)
    window = granule + tick_ns()
    assert st.racy_window_ns == window
    assert st.racy(stamp) and st.racy(stamp + window - 1)
    assert not st.racy(stamp + window)
    assert FileStat(10, stamp - 10 * granule, stamp, 1, 1).racy(stamp + window - 1)  # ctime


def test_a_racy_entry_is_never_stored(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"x")
    st = FileStat.of(f.lstat())
    cache = StatCache(tmp_path / FILENAME)
    newest = max(st.mtime_ns, st.ctime_ns)
    cache.add(f, st, newest + st.racy_window_ns - 1, Known("ab" * 32))
    cache.close()
    assert StatCache(tmp_path / FILENAME).get(f, st) is None
    cache.add(f, st, newest + st.racy_window_ns, Known("ab" * 32))
    cache.close()
    assert StatCache(tmp_path / FILENAME).get(f, st) == Known("ab" * 32)


def test_an_entry_without_what_a_commit_needs_is_not_used(local, models):
    """Files of a nested adapter were cached by a commit of the folder around it, as plain
    files (a blob id, no header, no tensor hashes); committing the nested adapter reads them."""
    repo, folder = local
    shutil.copytree(models["a2"], folder / "inner")
    settle(folder)
    commit(repo, folder)
    with reads(folder / "inner") as opened:
        inner = commit(repo, folder / "inner", line="inner")
    assert {os.path.basename(p) for p in opened} == {"adapter_config.json", WEIGHTS}
    direct = api.commit(repo, "direct", models["a2"], "m", author="test")
    assert api.show(repo, inner.id).tensors == api.show(repo, direct.id).tensors != []


def test_a_lying_cache_is_refused_by_the_copy_that_hashes(local):
    """A stat that matches while the bytes differ (a clock set back, a tool that restores
    ctime): the blob the cache names is not stored, so the file is copied again and checked
    against that id, and nothing is recorded."""
    repo, folder = local
    settle(folder)
    commit(repo, folder)
    weights = folder / WEIGHTS
    header = read_header(weights)
    cache = StatCache.in_folder(repo.mint_dir)
    fake = Known("ab" * 32, header.raw, {t.name: "cd" * 32 for t in header.tensors})
    cache.add(weights, FileStat.of(weights.lstat()), time.time_ns(), fake)
    cache.close()
    before = snapshot(repo)
    with pytest.raises(BlobChanged):
        commit(repo, folder)
    assert snapshot(repo) == before


def test_nan_weights_are_refused_in_the_pass_and_nothing_is_published(local):
    repo, folder = local
    before = snapshot(repo)
    _set_last_value(folder / WEIGHTS, float("nan"))
    with pytest.raises(InvalidSafetensors, match="NaN or infinite"):
        commit(repo, folder)
    assert snapshot(repo) == before
    assert list((repo.mint_dir / "objects" / "tmp").iterdir()) == []


def test_a_torn_entry_is_a_miss(local):
    """The cache is written without fsync: an entry whose values no longer match its digest
    (a crash left a new blob id beside an old page of tensor hashes) is not used."""
    repo, folder = local
    settle(folder)
    first = commit(repo, folder)
    weights = os.fsdecode(os.path.abspath(folder / WEIGHTS))
    db = sqlite3.connect(repo.mint_dir / FILENAME)
    (packed,) = db.execute("SELECT tensors FROM files WHERE path = ?", (weights,)).fetchone()
    stale = {name: "cd" * 32 for name in json.loads(zlib.decompress(packed))}
    packed = zlib.compress(json.dumps(stale, sort_keys=True).encode())
    db.execute("UPDATE files SET tensors = ? WHERE path = ?", (packed, weights))
    db.commit()
    db.close()
    with reads(folder) as opened:
        again = commit(repo, folder, line="other")
    assert set(opened) == {weights}  # its header, then the pass that copies it
    assert api.show(repo, again.id).tensors == api.show(repo, first.id).tensors


def test_a_corrupt_cache_is_started_afresh(local):
    repo, folder = local
    (repo.mint_dir / FILENAME).write_bytes(b"not a database")
    settle(folder)
    first = commit(repo, folder)
    with reads(folder) as opened:
        assert commit(repo, folder).id == first.id
    assert opened == []


def test_the_one_pass_records_the_hashes_hashlib_gives(local, models, tmp_path):
    """Blob ids and tensor hashes from the pass that copies (and from `hash_adapter`, a
    registry's commit) are those of hashing each file and each tensor's bytes on its own.
    The weights span several of the store's chunks, with tensors cut between two."""
    from mint.commits.adapter import hash_adapter, scan_adapter
    from mint.examples import tiny

    repo, _ = local
    folder = tiny.build_adapter(models["base"], tmp_path / "wide", seed=7, r=1024)
    raw = (folder / WEIGHTS).read_bytes()
    assert len(raw) > 2 * CHUNK
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    header.pop("__metadata__", None)
    tensors = {
        name: hashlib.sha256(raw[8 + n + a : 8 + n + b]).hexdigest()
        for name, (a, b) in ((k, v["data_offsets"]) for k, v in header.items())
    }
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}
    shown = api.show(repo, commit(repo, folder).id)
    assert {t.name: t.sha256 for t in shown.tensors} == tensors
    assert {path: f.sha256 for path, f in shown.files.items()} == files
    hashed = hash_adapter(scan_adapter(folder))
    assert hashed.tensor_hashes == tensors and hashed.blobs == files


# --- the pass itself ---------------------------------------------------------------


def _safetensors(path, tensors: dict[str, tuple[str, list[int], bytes]]) -> None:
    header, offset, data = {}, 0, b""
    for name, (dtype, shape, raw) in tensors.items():
        span = [offset, offset + len(raw)]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": span}
        offset, data = offset + len(raw), data + raw
    text = json.dumps(header).encode() + b"   "  # an odd length: values are not aligned
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


@pytest.mark.parametrize("chunk", [1, 3, 5, 7, 64, 1 << 20])
def test_tensor_pass_agrees_with_hashing_each_tensor_at_any_chunk_size(tmp_path, chunk):
    f32 = struct.pack("<4f", 1.0, -2.0, 3.5, 0.25)
    bf16 = struct.pack("<6H", 0x3F80, 0xBF80, 0x0000, 0x4000, 0x3F00, 0x7F7F)
    path = tmp_path / "w.safetensors"
    _safetensors(path, {"a": ("F32", [2, 2], f32), "b": ("BF16", [3, 2], bf16)})
    header = read_header(path)
    data = path.read_bytes()
    p = TensorPass(path, header)
    for i in range(0, len(data), chunk):
        p.update(data[i : i + chunk])
    got = p.finish(len(data))
    assert got == {"a": hashlib.sha256(f32).hexdigest(), "b": hashlib.sha256(bf16).hexdigest()}


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 1 << 20])
@pytest.mark.parametrize(
    "dtype,bad",
    [
        ("F32", struct.pack("<f", float("inf"))),
        ("F16", struct.pack("<e", float("nan"))),
        ("BF16", struct.pack("<H", 0xFFC1)),
        ("F64", struct.pack("<d", float("-inf"))),
        ("F8_E4M3", b"\xff"),
    ],
)
def test_tensor_pass_finds_a_value_cut_by_a_chunk(tmp_path, chunk, dtype, bad):
    width = len(bad)
    good = b"\x00" * width * 3
    path = tmp_path / "w.safetensors"
    _safetensors(path, {"t": (dtype, [4], good + bad)})
    data = path.read_bytes()
    p = TensorPass(path, read_header(path))
    with pytest.raises(InvalidSafetensors, match="NaN or infinite"):
        for i in range(0, len(data), chunk):
            p.update(data[i : i + chunk])
        p.finish(len(data))


def test_tensor_pass_refuses_a_header_other_than_the_one_parsed(tmp_path):
    path = tmp_path / "w.safetensors"
    _safetensors(path, {"t": ("F32", [1], struct.pack("<f", 1.0))})
    header = read_header(path)
    _safetensors(path, {"u": ("F32", [1], struct.pack("<f", 1.0))})  # same size, other name
    p = TensorPass(path, header)
    with pytest.raises(InvalidSafetensors, match="changed while it was being read"):
        p.update(path.read_bytes())


@pytest.mark.parametrize("make", [LocalObjectStore, MemoryObjectStore], ids=["local", "memory"])
def test_an_observer_that_refuses_leaves_the_store_as_it_was(tmp_path, make):
    store = make(tmp_path / "objects") if make is LocalObjectStore else make()
    src = tmp_path / "f"
    src.write_bytes(b"x" * 3_000_000)

    class Refuse:
        seen = 0

        def update(self, chunk: bytes) -> None:
            Refuse.seen += len(chunk)

        def done(self, blob_id, size) -> None:
            raise ValueError("no")

    with pytest.raises(ValueError):
        store.put(src, observer=Refuse())
    assert Refuse.seen == 3_000_000 and list(store.iter()) == []
    if make is LocalObjectStore:
        assert list((tmp_path / "objects" / "tmp").iterdir()) == []


# --- helpers -----------------------------------------------------------------------


def _blob(repo, cid: str) -> str:
    return api.show(repo, cid).files[WEIGHTS].sha256


def _flip_last_value(path) -> None:
    """Change the last value's lowest mantissa bit in place: the size stays, and so does
    finiteness."""
    last = max(read_header(path).tensors, key=lambda t: t.end)
    width = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}[last.dtype]
    with open(path, "r+b") as f:
        f.seek(last.end - width)
        low = f.read(1)
        f.seek(last.end - width)
        f.write(bytes([low[0] ^ 0x01]))


def _set_last_value(path, value: float) -> None:
    header = read_header(path)
    last = max(header.tensors, key=lambda t: t.end)
    assert last.dtype == "F32", last.dtype
    with open(path, "r+b") as f:
        f.seek(last.end - 4)
        f.write(struct.pack("<f", value))
