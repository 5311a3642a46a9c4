"""A repository: an object store plus a metadata database, found like git finds `.git`."""

from __future__ import annotations

import functools
import getpass
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from mint.db import Database, sqlite_url
from mint.errors import InvalidConfig, RepoExists, RepoNotFound
from mint.store import LocalObjectStore

DIRNAME = ".mint"
CONFIG = "config.json"


@dataclass
class Repo:
    root: Path  # the folder that holds .mint/
    db: Database
    store: LocalObjectStore

    @property
    def mint_dir(self) -> Path:
        return self.root / DIRNAME

    def close(self) -> None:
        self.db.dispose()


def init(path: str | os.PathLike = ".", db_url: str | None = None) -> tuple[Repo, bool]:
    """Create `path/.mint/` and migrate its database to head. Returns (repo, created)."""
    root = Path(path).resolve()
    mint_dir = root / DIRNAME
    created = not (mint_dir / CONFIG).exists()
    if not created:
        existing = _read_config(mint_dir)
        if db_url and existing.get("db") and existing["db"] != db_url:
            raise RepoExists(f"{mint_dir} already exists with another database")
    (mint_dir / "objects").mkdir(parents=True, exist_ok=True)
    url = db_url or sqlite_url(mint_dir / "mint.db")
    db = Database(url)
    db.upgrade()
    if created:
        _write_config(mint_dir, {"format": 1, "db": db_url})
    return Repo(root, db, LocalObjectStore(mint_dir / "objects")), created


def open_repo(path: str | os.PathLike | None = None, *, check_schema: bool = True) -> Repo:
    """Open the repository at `path`, or found by walking up from the current folder."""
    root = find_root(path)
    config = _read_config(root / DIRNAME)
    url = config.get("db") or sqlite_url(root / DIRNAME / "mint.db")
    db = Database(url)
    if check_schema:
        db.check_schema()
    return Repo(root, db, LocalObjectStore(root / DIRNAME / "objects"))


def find_root(path: str | os.PathLike | None = None) -> Path:
    if path is not None:
        root = Path(path).resolve()
        if (root / DIRNAME / CONFIG).exists():
            return root
        raise RepoNotFound(f"no mint repository at {root}")
    start = Path.cwd().resolve()
    for folder in (start, *start.parents):
        if (folder / DIRNAME / CONFIG).exists():
            return folder
    raise RepoNotFound(f"not inside a mint repository (searched up from {start})")


def _read_config(mint_dir: Path) -> dict:
    try:
        return json.loads((mint_dir / CONFIG).read_text())
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError as exc:
        raise InvalidConfig(f"{mint_dir / CONFIG} is not valid JSON: {exc}") from None


def _write_config(mint_dir: Path, config: dict) -> None:
    tmp = mint_dir / (CONFIG + ".tmp")
    tmp.write_text(json.dumps(config, indent=2) + "\n")
    os.replace(tmp, mint_dir / CONFIG)


def current_user() -> str:
    """MINT_USER, else git's user.name, else the login name."""
    return os.environ.get("MINT_USER") or _fallback_user()


@functools.lru_cache(maxsize=1)
def _fallback_user() -> str:
    # Asked once per process: `git config` is a subprocess, a few ms on every promote.
    try:
        out = subprocess.run(
            ["git", "config", "user.name"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
        if out:
            return out
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name in some containers
        return "unknown"
