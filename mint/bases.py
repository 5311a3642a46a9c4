"""Frozen base models: registered by name and by a fingerprint of their config.json."""

from __future__ import annotations

import json
import os
from pathlib import Path

import sqlalchemy as sa

from mint import schema as s
from mint.db import insert_new
from mint.errors import BaseExists, InvalidConfig, UnknownBase
from mint.ids import iso, object_id, utcnow
from mint.objects import Base
from mint.refs import check_name
from mint.repo import Repo

# Keys that transformers writes but that do not change the network: two saves of one base
# by different library versions must fingerprint the same.
VOLATILE_KEYS = (
    "transformers_version",
    "_name_or_path",
    "architectures_auto",
    "torch_dtype",
    "dtype",
)


def read_base_config(path: str | Path) -> dict:
    """Read config.json from a model folder, or the file itself."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise InvalidConfig(f"no config.json at {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidConfig(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise InvalidConfig(f"{path} does not hold a JSON object")
    return config


def fingerprint(config: dict) -> str:
    """sha256 of the canonical config, without the keys that do not change the network."""
    return object_id({k: v for k, v in config.items() if k not in VOLATILE_KEYS})


def fingerprint_path(path: str | Path) -> str:
    return fingerprint(read_base_config(path))


# --- registered bases ---------------------------------------------------------


def base_add(repo: Repo, name: str, path: str | os.PathLike) -> Base:
    """Register a frozen base by its config.json. Re-adding the same config is a no-op."""
    check_name("base", name)
    config = read_base_config(path)
    fp = fingerprint(config)
    row = dict(name=name, fingerprint=fp, config=config, source=str(path), created_at=utcnow())
    with repo.db.write() as conn:
        found = _get(conn, name)
        if found is None:
            insert_new(conn, s.bases, row)
            found = _get(conn, name)
        if found.fingerprint != fp:
            raise BaseExists(name, found.fingerprint)
        return base_info(found)


def base_ls(repo: Repo) -> list[Base]:
    """Every registered base, by name."""
    with repo.db.read() as conn:
        return [base_info(r) for r in conn.execute(sa.select(s.bases).order_by(s.bases.c.name))]


def _get(conn, name: str):
    return conn.execute(sa.select(s.bases).where(s.bases.c.name == name)).first()


def base_info(row) -> Base:
    return Base(row.name, row.fingerprint, row.config, row.source, iso(row.created_at))


def get_base(conn, name: str):
    """The row of base NAME, or UnknownBase."""
    row = _get(conn, name)
    if row is None:
        known = conn.execute(sa.select(s.bases.c.name).order_by(s.bases.c.name)).scalars()
        raise UnknownBase(name, known=list(known))
    return row


def find_base(conn, adapter_base: str | None, explicit: str | None):
    """The registered base an adapter is bound to: EXPLICIT, else its base_model_name_or_path."""
    if explicit:
        return get_base(conn, explicit)
    return choose_base(list(conn.execute(sa.select(s.bases))), adapter_base, None)


def choose_base(bases: list, adapter_base: str | None, explicit: str | None):
    """Among BASES (rows or `Base`s), the one an adapter is bound to: EXPLICIT by name, else
    the one named or sourced as its base_model_name_or_path. One rule, wherever the bases are
    listed (a local database, a registry)."""
    known = sorted(b.name for b in bases)
    if explicit:
        for b in bases:
            if b.name == explicit:
                return b
        raise UnknownBase(explicit, known=known)
    if not adapter_base:
        raise UnknownBase(None, known=known)
    candidates = {adapter_base, Path(adapter_base.rstrip("/")).name}
    for b in bases:
        if b.name in candidates or b.source == adapter_base:
            return b
    why = f"the adapter's base {adapter_base!r} is not a registered base"
    raise UnknownBase(adapter_base, why, known)
