"""What `mint commit` does before it loads the database layer (issue 24).

A whole `mint commit` process used to import SQLAlchemy and open the database before it read
the first byte of the adapter: a third of a second in which the disk stood idle. Two things
need no database, and happen first, with nothing heavier than the standard library's sqlite3:

* `unchanged`: the re-commit of a folder the stat cache knows entirely, and whose tree is
  the line's head's, answers "nothing to commit" from the stat cache and three reads of a
  SQLite repository's database file. It is `mint.porcelain.commit`'s `_same_as_head` (the same
  rule, and the same base rule as `mint.bases.choose_base`), for the case where the database
  is SQLite and its schema the one this mint knows; anything else, or any doubt, is None, and
  the commit takes its usual way, which gives the answer or the error.
* `start`: the copy of the folder into a local object store begins in a forked child
  process (or on a thread: `mint.commits.ahead`), while the main thread imports the database
  layer and checks the commit; the commit publishes the staged blobs once its checks passed.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from mint.commits.adapter import CONFIG, walk_adapter
from mint.commits.statcache import StatCache
from mint.commits.trees import tree_id
from mint.errors import MintError
from mint.repo import CONFIG as REPO_CONFIG
from mint.repo import DIRNAME, find_root

SIGNATURE = "model.sig"  # a signed folder: the commit reads it itself (mint.signing)
KEY_SUFFIXES = (".key", ".pem", ".p8")  # what `refuse_private_keys` looks into
ADAPTER = "adapter"  # mint.ids.Kind.ADAPTER, as the lines table stores it


def repository(where: str | None) -> tuple[Path, dict] | None:
    """(the .mint folder, its config) of the repository at WHERE (None: found from the current
    folder, as `open_repo` finds it), or None where there is none to be found."""
    try:
        mint_dir = find_root(where) / DIRNAME
        return mint_dir, json.loads((mint_dir / REPO_CONFIG).read_text())
    except (MintError, OSError, ValueError):
        return None


def unchanged(
    where: str | None,
    folder: str | os.PathLike,
    line: str,
    base: str | None = None,
    texts: tuple[str, ...] = (),
) -> str | None:
    """LINE's head, if committing FOLDER on it would record nothing, as far as the stat cache
    and a SQLite database tell without SQLAlchemy; else None (the commit finds out itself).
    TEXTS: the message and metadata, which the commit would refuse if they held a NUL."""
    found = repository(where)
    if found is None or found[1].get("db") or any("\x00" in t for t in texts):
        return None
    mint_dir = found[0]
    try:
        _, files, _ = walk_adapter(folder)
    except MintError:
        return None
    if any(f.path == SIGNATURE or f.path.lower().endswith(KEY_SUFFIXES) for f in files):
        return None
    cache = StatCache.in_folder(mint_dir)
    try:
        known = {f.path: cache.get(f.abspath, f.stat) for f in files}
    finally:
        cache.close()
    if None in known.values() or known[CONFIG].head is None:
        return None
    try:
        named = json.loads(known[CONFIG].head).get("base_model_name_or_path")
    except (ValueError, AttributeError):
        return None
    entries = {f.path: (known[f.path].blob, f.size) for f in files}
    try:
        head, head_tree, fingerprint = _head_and_base(
            mint_dir / "mint.db", line, named if isinstance(named, str) else None, base
        )
    except sqlite3.Error:
        return None
    if head is None or fingerprint is None or tree_id(entries, fingerprint) != head_tree:
        return None
    return head


def _head_and_base(db: Path, line: str, named: str | None, explicit: str | None):
    """(LINE's head, its tree, the fingerprint of the base the adapter binds to), each None
    where the database has none, or holds something other than what this mint expects."""
    if not db.is_file():
        return None, None, None
    conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=2.0)
    try:
        version = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        if version is None or version[0] != schema_head():
            return None, None, None
        row = conn.execute("SELECT kind, head FROM lines WHERE name = ?", (line,)).fetchone()
        if row is None or row[0] != ADAPTER or row[1] is None:
            return None, None, None
        tree = conn.execute("SELECT tree FROM commits WHERE id = ?", (row[1],)).fetchone()
        bases = conn.execute("SELECT name, source, fingerprint FROM bases").fetchall()
    finally:
        conn.close()
    return row[1], tree[0] if tree else None, _choose_base(bases, named, explicit)


def _choose_base(bases: list, named: str | None, explicit: str | None) -> str | None:
    """`mint.bases.choose_base` over (name, source, fingerprint) rows: the fingerprint of the
    base EXPLICIT names, else of the one named or sourced as NAMED; None for none."""
    if explicit:
        return next((fp for name, _, fp in bases if name == explicit), None)
    if not named:
        return None
    candidates = {named, Path(named.rstrip("/")).name}
    return next((fp for name, src, fp in bases if name in candidates or src == named), None)


def schema_head() -> str:
    """The newest migration's revision, from the migration scripts' names (NNNN_what.py, whose
    revision is NNNN): `mint.db.SCHEMA_HEAD` without importing SQLAlchemy (a test keeps the
    two equal)."""
    import mint.migrations

    versions = Path(mint.migrations.__file__).parent / "versions"
    return max(p.name[:4] for p in versions.glob("[0-9][0-9][0-9][0-9]_*.py"))


def start(where: str | None, folder: str | os.PathLike) -> None:
    """Start reading FOLDER into the repository's local object store (not an S3 store, not a
    signed folder): `mint.commits.ahead.read_ahead`."""
    found = repository(where)
    if found is None or found[1].get("store") or os.path.isfile(Path(folder) / SIGNATURE):
        return
    from mint.commits.ahead import read_ahead
    from mint.store import LocalObjectStore

    mint_dir = found[0]
    read_ahead(folder, LocalObjectStore(mint_dir / "objects"), mint_dir / "statcache.db")


def stop() -> None:
    """Drop every read-ahead no commit claimed (the commit failed, or did not need it)."""
    import sys

    ahead = sys.modules.get("mint.commits.ahead")
    if ahead is not None:
        ahead.drop_read_aheads()
