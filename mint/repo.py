"""A repository: an object store plus a metadata database, found like git finds `.git`.

`.mint/config.json` keeps the database URL without its password. A password given at
`init` goes to `.mint/db-password`, readable by its owner alone; PostgreSQL's own
PGPASSWORD and ~/.pgpass work as well.

Blobs go to `.mint/objects/` unless `init` was given a store URL (`s3://BUCKET/PREFIX`),
which the config keeps as `store`; an S3 store reads through a local verified cache in
`.mint/cache/s3/`, at most `store_cache_bytes` (10 GiB unless the config says otherwise).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mint.errors import InvalidConfig, RepoExists, RepoNotFound
from mint.store import LocalObjectStore, ObjectStore

if TYPE_CHECKING:  # the database layer loads when a repository is opened, not before
    from mint.db import Database

DIRNAME = ".mint"
CONFIG = "config.json"
PASSWORD = "db-password"


@dataclass
class Repo:
    root: Path  # the folder that holds .mint/
    db: Database
    store: ObjectStore

    @property
    def mint_dir(self) -> Path:
        return self.root / DIRNAME

    def close(self) -> None:
        self.db.dispose()


def init(
    path: str | os.PathLike = ".", db_url: str | None = None, store: str | None = None
) -> tuple[Repo, bool]:
    """Create `path/.mint/` and migrate its database to head. Returns (repo, created).

    STORE is where blobs go: None for `.mint/objects/`, or `s3://BUCKET/PREFIX`."""
    root = Path(path).resolve()
    mint_dir = root / DIRNAME
    created = not (mint_dir / CONFIG).exists()
    public_url, password = split_password(db_url) if db_url else (None, None)
    config = {"format": 1, "db": public_url, **({"store": store} if store else {})}
    if not created:
        config = _check_same(mint_dir, public_url, store)
    objects = open_store(mint_dir, config)
    from mint.db import Database, sqlite_url

    db = Database(db_url or sqlite_url(mint_dir / "mint.db"))
    if created and db_url:
        db.check_reachable()  # before anything is written: a wrong URL leaves no .mint/
    if created and store:
        objects.check_reachable()  # likewise for a bucket that does not answer
    mint_dir.mkdir(parents=True, exist_ok=True)
    if not config.get("store"):
        (mint_dir / "objects").mkdir(exist_ok=True)
    db.upgrade()
    if created:
        if password is not None:
            _write_private(mint_dir / PASSWORD, password)
        _write_config(mint_dir, config)
    return Repo(root, db, objects), created


def _check_same(mint_dir: Path, public_url: str | None, store: str | None) -> dict:
    """The existing config; RepoExists if it names another database or store."""
    config = _read_config(mint_dir)
    existing = config.get("db")
    if public_url and existing and split_password(existing)[0] != public_url:
        raise RepoExists(f"{mint_dir} already exists with another database")
    if store and store != config.get("store"):
        raise RepoExists(f"{mint_dir} already exists with another object store")
    return config


def open_store(mint_dir: Path, config: dict) -> ObjectStore:
    """The repository's object store, as its config says (`.mint/objects/` by default)."""
    url = config.get("store")
    if not url:
        return LocalObjectStore(mint_dir / "objects")
    if not isinstance(url, str) or not url.startswith("s3://"):
        raise InvalidConfig(f"unknown object store {url!r} (expected s3://BUCKET/PREFIX)")
    from mint.store import S3ObjectStore

    limit = config.get("store_cache_bytes")
    extra = {"cache_bytes": int(limit)} if limit else {}
    try:
        return S3ObjectStore.from_url(url, cache_dir=mint_dir / "cache" / "s3", **extra)
    except ValueError as exc:
        raise InvalidConfig(str(exc)) from None


def open_repo(path: str | os.PathLike | None = None, *, check_schema: bool = True) -> Repo:
    """Open the repository at `path`, or found by walking up from the current folder."""
    root = find_root(path)
    mint_dir = root / DIRNAME
    config = _read_config(mint_dir)
    url = config.get("db")
    from mint.db import Database, sqlite_url

    db = Database(_with_password(url, mint_dir) if url else sqlite_url(mint_dir / "mint.db"))
    if check_schema:
        db.check_schema()
    return Repo(root, db, open_store(mint_dir, config))


def db_upgrade(path: str | os.PathLike | None = None) -> tuple[str | None, str]:
    """Migrate the repository's database to head. Returns (from, to)."""
    repo = open_repo(path, check_schema=False)
    try:
        return repo.db.upgrade()
    finally:
        repo.close()


def find_root(path: str | os.PathLike | None = None) -> Path:
    if path is not None:
        root = Path(path).resolve()
        if (root / DIRNAME / CONFIG).exists():
            return root
        raise RepoNotFound(f"no mint repository at {root}", str(path))
    start = Path.cwd().resolve()
    for folder in (start, *start.parents):
        if (folder / DIRNAME / CONFIG).exists():
            return folder
    raise RepoNotFound(f"not inside a mint repository (searched up from {start})")


def split_password(url: str) -> tuple[str, str | None]:
    """(the URL without its password, the password or None)."""
    import sqlalchemy as sa

    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        raise InvalidConfig(f"not a database URL: {url!r}") from None
    password = parsed.password
    # URL.set(password=None) means "leave it"; the URL is a named tuple, so replace the field.
    public = parsed._replace(password=None).render_as_string(hide_password=False)
    return public, (str(password) if password is not None else None)


def _with_password(url: str, mint_dir: Path) -> str:
    secret = mint_dir / PASSWORD
    if not secret.exists():
        return url
    import sqlalchemy as sa

    password = secret.read_text(encoding="utf-8").rstrip("\n")
    return sa.engine.make_url(url).set(password=password).render_as_string(hide_password=False)


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


def _write_private(path: Path, text: str) -> None:
    """Write a secret readable by its owner alone (created 0600, never wider)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text + "\n")
