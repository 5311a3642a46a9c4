"""A throwaway PostgreSQL database, for the tests and the benchmarks alike."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import sqlalchemy as sa

PG_ADMIN_URL = os.environ.get(
    "MINT_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


@contextlib.contextmanager
def pg_database(prefix: str = "mint_test") -> Iterator[str]:
    """A new, empty PostgreSQL database, dropped afterwards. Yields its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.engine.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
