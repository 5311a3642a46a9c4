"""How a registry replica learns that a token was revoked elsewhere (issue 35).

A `TokenCache` believes a good token without reading the tokens table only while the
generation a watch reports is the one it read the token under; a watch that cannot tell
(its database connection lost, not yet listening) reports None, and then nothing is
believed from memory: every request reads the tokens table, as the cache may only ever
remember longer that a token is *not* valid. Reading a generation sends nothing to the
database, so a request costs no more round trips than before.

- `PostgresWatch`: a thread holds one connection that LISTENs on the revocation channel
  (`mint.team.revocation`); each notification, and each reconnection, is a new generation.
  A revocation reaches every replica when the database delivers its notification, at the
  revoke's commit (a millisecond or so on one network).
- `SqliteWatch`: `PRAGMA data_version` of the database file, which changes whenever another
  connection (another process's, or this one's own pool) commits: a revocation, or any other
  write, makes the next request read its token again. It reads the file's shared memory,
  not the tables.
"""

from __future__ import annotations

import logging
import select
import sqlite3
import threading
import time
import weakref

log = logging.getLogger("mint.registry")

RETRY = 1.0  # seconds before listening again after the connection was lost (doubled, up to
MAX_RETRY = 30.0  # this, while it cannot connect)
POLL = 1.0  # seconds a wait for notifications lasts before the thread looks at `closed`


class SqliteWatch:
    """The generation of a SQLite database file: its `data_version`."""

    def __init__(self, path: str):
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()

    def generation(self) -> int | None:
        with self._lock:
            try:
                return self._conn.execute("PRAGMA data_version").fetchone()[0]
            except sqlite3.Error:
                return None

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class PostgresWatch:
    """The number of revocations (and reconnections) a LISTENing connection has seen."""

    def __init__(self, url, owner=None):
        self.conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
        # the thread ends when OWNER (the token cache) is gone, closed or not: an app made and
        # dropped without its lifespan (a test's) leaves no connection behind
        self._owner = weakref.ref(owner) if owner is not None else (lambda: self)
        self._generation, self._live, self._fd = 0, False, None
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mint-token-watch", daemon=True)
        self._thread.start()

    def generation(self) -> int | None:
        """The generation now; None while not listening, or while a notification waits to
        be read (it arrived, and the thread has not run yet: a syscall, no round trip)."""
        with self._lock:
            if not self._live:
                return None
            generation, fd = self._generation, self._fd
        if fd is not None:
            try:
                if select.select([fd], [], [], 0)[0]:
                    return None
            except (OSError, ValueError):  # closed meanwhile: the thread notices
                return None
        return generation

    def wait_live(self, timeout: float) -> bool:
        """Whether it listens within TIMEOUT seconds."""
        deadline = time.monotonic() + timeout
        while self.generation() is None and time.monotonic() < deadline:
            self._closed.wait(0.01)
        return self.generation() is not None

    def close(self) -> None:
        self._closed.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=POLL + 1)

    def _done(self) -> bool:
        return self._closed.is_set() or self._owner() is None

    def _bump(self, live: bool, fd: int | None = None) -> None:
        with self._lock:
            self._generation += 1
            self._live, self._fd = live, fd

    def _run(self) -> None:
        import psycopg

        from mint.team.revocation import CHANNEL

        wait = RETRY
        while not self._done():
            try:
                with psycopg.connect(self.conninfo, autocommit=True, **_KEEPALIVE) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    fd, wait = conn.pgconn.socket, RETRY
                    self._bump(True, fd)  # what was believed before may be stale: forget it
                    while not self._done():
                        for _ in conn.notifies(timeout=POLL):
                            self._bump(True, fd)
            except Exception as exc:  # noqa: BLE001 - lost: believe nothing until back
                if not self._done():
                    log.warning("token revocations: not listening (%s); retrying", exc)
            self._bump(live=False)
            self._closed.wait(wait)
            wait = min(wait * 2, MAX_RETRY)


# A connection that dies without a word (a network cut) is noticed within about 10 s; until
# then a good token is believed at most TOKEN_TTL seconds at a time (mint.registry.auth).
_KEEPALIVE = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 2,
}


def watch_for(repo, owner=None):
    """The watch of REPO's database (one that listens for as long as OWNER lives)."""
    engine = repo.db.engine
    if engine.dialect.name == "postgresql":
        return PostgresWatch(engine.url, owner)
    return SqliteWatch(engine.url.database)
