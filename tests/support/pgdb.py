"""A throwaway PostgreSQL database, for the tests and the benchmarks alike; and a pool of
migrated databases that the `repo` fixture empties and hands out again."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

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


class DatabasePool:
    """Migrated PostgreSQL databases for one test process, each emptied and handed out again.

    Creating, migrating and dropping a database costs seconds; emptying one costs a few
    milliseconds. `take()` gives (url, template): the database, empty and at the schema's
    head, and a repository folder made by `mint init` on it, whose `.mint` a test copies.
    `give_back(url)` ends every other session on the database and deletes its rows, or drops
    it when a test left more than rows behind (another schema version, tables of its own).
    A database in the pool takes no connections, so a straggler cannot write into the next
    test's.
    """

    def __init__(self, folder: Path):
        self.folder = folder
        self.free: list[str] = []
        self.templates: dict[str, Path] = {}
        self._admin = sa.create_engine(
            PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool
        )
        self._conn = self._admin.connect()

    def take(self) -> tuple[str, Path]:
        if self.free:
            url = self.free.pop()
            self._admin_sql(url, 'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
            return url, self.templates[url]
        from mint import api

        name = f"mint_test_{uuid.uuid4().hex[:12]}"
        self._conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        url = sa.engine.make_url(PG_ADMIN_URL).set(database=name)
        url = url.render_as_string(hide_password=False)
        repo, _ = api.init(self.folder / name, url)
        repo.close()
        self.templates[url] = self.folder / name
        return url, self.folder / name

    def give_back(self, url: str) -> None:
        self._admin_sql(
            url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = '{name}' AND pid <> pg_backend_pid()",
        )
        if _emptied(url):
            self._admin_sql(url, 'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            self.free.append(url)
        else:
            self._drop(url)

    def close(self) -> None:
        for url in list(self.templates):
            self._drop(url)
        self._conn.close()
        self._admin.dispose()

    def _drop(self, url: str) -> None:
        self._admin_sql(url, 'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.templates.pop(url, None)

    def _admin_sql(self, url: str, sql: str) -> None:
        """SQL on the admin connection, {name} standing for URL's database (ours: a safe name)."""
        self._conn.execute(sa.text(sql.format(name=sa.engine.make_url(url).database)))


def _emptied(url: str) -> bool:
    """Delete every row and restart every sequence, if the database holds exactly the
    schema's tables at its head revision; False (nothing changed) otherwise."""
    from mint.db import SCHEMA_HEAD
    from mint.schema import metadata

    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.begin() as conn:
            found = conn.execute(
                sa.text(
                    "SELECT (SELECT array_agg(tablename::text ORDER BY tablename) FROM pg_tables"
                    "        WHERE schemaname = current_schema()),"
                    "       (SELECT array_agg(quote_ident(schemaname) || '.' ||"
                    "                         quote_ident(sequencename)) FROM pg_sequences),"
                    "       (SELECT array_agg(version_num::text) FROM alembic_version)"
                )
            ).one()
            tables, sequences, version = found
            if tables != sorted([*metadata.tables, "alembic_version"]) or version != [SCHEMA_HEAD]:
                return False
            statements = [f'DELETE FROM "{t.name}"' for t in reversed(metadata.sorted_tables)]
            statements += [f"ALTER SEQUENCE {s} RESTART" for s in sequences or ()]
            conn.exec_driver_sql("; ".join(statements))
        return True
    except sa.exc.DBAPIError:
        return False
    finally:
        engine.dispose()
