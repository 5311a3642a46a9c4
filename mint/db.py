"""Engines, transactions and schema versions for the metadata database."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from mint.errors import DatabaseUnavailable, SchemaOutdated

# The newest migration. Checked against alembic's own answer in the tests, and kept here so
# that opening a repository does not load alembic to parse every migration script.
SCHEMA_HEAD = "0016"

SQLITE_BUSY_TIMEOUT_MS = 30_000
BLOB_GUARD_KEY = 0x6D696E74  # "mint": the advisory lock between gc and blob-referencing writes


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def make_engine(url: str, lock_wait_ms: int = SQLITE_BUSY_TIMEOUT_MS) -> Engine:
    """An engine for `url`. SQLite gets WAL, a busy timeout and explicit transactions, and
    keeps its connections open in a pool, as PostgreSQL's engine does: opening one costs its
    pragmas, and closing the last one checkpoints the WAL, milliseconds each transaction
    paid (issue 24: a promote at 10^5 commits took 40 ms, 10 with the pool). LOCK_WAIT_MS:
    how long a statement waits for a lock another transaction holds (SQLite's busy timeout;
    PostgreSQL's lock_timeout when it is not the default)."""
    if url.startswith("sqlite"):
        args = {"timeout": lock_wait_ms / 1000, "check_same_thread": False}
        engine = sa.create_engine(url, connect_args=args, poolclass=sa.QueuePool)
        _sqlite_setup(engine, lock_wait_ms)
        return engine
    if lock_wait_ms != SQLITE_BUSY_TIMEOUT_MS:
        args = {"options": f"-c lock_timeout={int(lock_wait_ms)}"}
        return sa.create_engine(url, pool_pre_ping=False, connect_args=args)
    return sa.create_engine(url, pool_pre_ping=False)


def _sqlite_setup(engine: Engine, lock_wait_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn, _record):
        # Let SQLAlchemy emit BEGIN itself, so writers can take the lock up front.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={int(lock_wait_ms)}")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn):
        # A writer takes the write lock when it begins: a deferred transaction that
        # reads and then writes can fail at once with "database is locked" instead of
        # waiting its turn.
        immediate = conn.get_execution_options().get("mint_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


class Database:
    """One metadata database: read and write transactions, and its schema version."""

    def __init__(self, url: str):
        self.url = url
        self.engine = make_engine(url)
        self.dialect = self.engine.dialect.name

    def limit_lock_wait(self, seconds: float) -> None:
        """Wait at most SECONDS for a lock another transaction holds, from now on (a new
        pool): a serving process's writes (traces, feedback) give up and try again later
        rather than hold a request for the default busy timeout."""
        old = self.engine
        self.engine = make_engine(self.url, lock_wait_ms=max(1, int(seconds * 1000)))
        old.dispose()

    @contextlib.contextmanager
    def read(self, *, autocommit: bool = False) -> Iterator[Connection]:
        """A connection to read on, in a transaction.

        AUTOCOMMIT: on PostgreSQL the statements run without BEGIN and COMMIT, two round trips
        fewer (a status page 0.88 -> 0.62 ms p50 at 10^6 commits). For reads that need no
        common snapshot of their statements, which READ COMMITTED, PostgreSQL's level here,
        does not give them anyway; not for SET LOCAL, server-side cursors (yield_per) or
        savepoints, which need a transaction. The connection goes back to the pool with its
        isolation level reset. SQLite reads in a transaction either way: its BEGIN costs no
        round trip, and keeps one snapshot for every statement."""
        with self._connect() as conn:
            if autocommit and self.dialect == "postgresql":
                conn.execution_options(isolation_level="AUTOCOMMIT")
                yield conn
                return
            with conn.begin():
                yield conn

    @contextlib.contextmanager
    def write(self) -> Iterator[Connection]:
        """A transaction that commits on success and rolls back on any error."""
        with self._connect() as conn:
            conn.execution_options(mint_write=True)
            with conn.begin():
                yield conn

    @contextlib.contextmanager
    def _connect(self) -> Iterator[Connection]:
        try:
            conn = self.engine.connect()
        except sa.exc.OperationalError as exc:
            why = _first_line(exc)
            missing = "does not exist" in why and "database" in why
            raise DatabaseUnavailable(self.safe_url, why, missing_database=missing) from None
        with conn:
            yield conn

    @property
    def safe_url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    def guard_blobs(self, conn: Connection, *, exclusive: bool) -> None:
        """Serialise gc's deletions with the transactions that start referring to blobs.

        A writer (shared) checks its blobs exist inside the transaction that records them;
        gc (exclusive) re-checks liveness and deletes under the same lock. So a blob is
        either seen by the writer and not deleted until its rows are visible, or deleted
        first and found missing by the writer, which then stores it again. On SQLite the
        write transaction (BEGIN IMMEDIATE) is that lock already; PostgreSQL takes a
        transaction-scoped advisory lock."""
        if self.dialect == "postgresql":
            fn = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
            conn.execute(sa.text(f"SELECT {fn}(:key)"), {"key": BLOB_GUARD_KEY})

    def check_reachable(self) -> None:
        """Connect once; DatabaseUnavailable says why it failed."""
        with self._connect():
            pass

    # --- schema ------------------------------------------------------------

    def current_revision(self) -> str | None:
        with self.read() as conn:
            try:
                with conn.begin_nested():
                    return conn.execute(
                        sa.text("SELECT version_num FROM alembic_version")
                    ).scalar()
            except sa.exc.DatabaseError:  # no such table: a database never migrated
                return None

    def check_schema(self) -> None:
        """Refuse to work on a database whose schema is not at the migrations' head."""
        current = self.current_revision()
        if current != SCHEMA_HEAD:
            raise SchemaOutdated(current, SCHEMA_HEAD)

    def upgrade(self) -> tuple[str | None, str]:
        """Run the migrations to head. Returns (from, to)."""
        from alembic import command

        before = self.current_revision()
        with self.engine.begin() as conn:
            cfg = alembic_config(self.url)
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
        return before, head_revision()

    def dispose(self) -> None:
        self.engine.dispose()


def migrations_dir() -> Path:
    return Path(str(resources.files("mint.migrations")))


def alembic_config(url: str):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head_revision() -> str:
    """The migrations' head, as alembic computes it (tests check SCHEMA_HEAD against it)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def insert_new(conn: Connection, table: sa.Table, row: dict) -> bool:
    """Insert ROW; False (and nothing written) when a unique key says it exists already, as
    when another writer inserted it a moment earlier. Check-then-insert races end here."""
    try:
        with conn.begin_nested():
            conn.execute(table.insert().values(**row))
        return True
    except sa.exc.IntegrityError as exc:
        if not is_unique_violation(exc):
            raise
        return False


def plain_rows(conn: Connection, statement, params: dict | None = None) -> list[tuple]:
    """STATEMENT's rows as the driver gives them, tuples, without building SQLAlchemy's `Row`
    for each: for a read of thousands of rows whose columns are strings and integers, which
    neither driver converts (issue 24: 0.4 of the 4 ms of `status` of 1,000 lines). The
    statement runs as any other does: compiled once, cached, seen by the engine's events."""
    result = conn.execute(statement, params)
    try:
        return result.cursor.fetchall()
    finally:
        result.close()


def is_unique_violation(exc: sa.exc.IntegrityError) -> bool:
    text = str(exc.orig).lower()
    return "unique" in text or "duplicate key" in text or "primary key" in text


def _first_line(exc: BaseException) -> str:
    return (
        str(getattr(exc, "orig", exc)).strip().splitlines()[0] if str(exc) else type(exc).__name__
    )
