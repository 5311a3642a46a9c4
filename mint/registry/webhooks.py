"""The webhook worker: every ref move POSTed as signed JSON to the URLs registered (the hooks
themselves, and the user operations over them, are `mint.team.webhooks`), with retries. The
worker, run inside `mint registry serve`:

1. fans the rows past each hook's cursor out into `webhook_deliveries` rows; the cursor moves
   by compare-and-swap in the same transaction as the inserts, and a delivery row is unique per
   (hook, event), so replicas over one database never create one twice;
2. claims a due delivery by moving its `lease_until` forward with a compare-and-swap;
3. POSTs the event (`mint.refs.events.event_of`, the event stream's shape) signed with
   HMAC-SHA256 of the raw body, and records the answer: 2xx delivered; a 5xx, a 429 or no
   answer is retried after 1, 2, 4, ... seconds up to MAX_ATTEMPTS; any other answer fails.

docs/webhooks.md describes the payload and the headers for receivers.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import hmac
import json
import logging
import os
import threading
from dataclasses import dataclass

import sqlalchemy as sa

from mint import __version__
from mint import schema as s
from mint.db import insert_new
from mint.ids import as_utc, utcnow
from mint.refs.events import event_of, rows_after
from mint.repo import Repo

log = logging.getLogger("mint.registry")

MAX_ATTEMPTS = 8
BACKOFF = 1.0  # seconds before the first retry; doubled for each one after
BACKOFF_MAX = 300.0
TIMEOUT = 5.0  # seconds for one POST
LEASE = 60.0  # seconds a claimed delivery is another replica's to leave alone
GAP_WAIT = 10.0  # seconds an id gap may be a transaction not yet committed
POLL = 0.25  # seconds between looks at the tables
SIGNATURE_HEADER = "X-Mint-Signature"


# --- fan-out: events into delivery rows -------------------------------------------------


def fan_out(repo: Repo) -> int:
    """Turn the events past each live hook's cursor into pending deliveries. Returns how many
    delivery rows this call made (another replica may have made the rest)."""
    w = s.webhooks.c
    with repo.db.read() as conn:
        hooks = list(conn.execute(sa.select(s.webhooks).where(w.removed_at.is_(None))))
    if not hooks:
        return 0
    made = 0
    for hook in hooks:
        rows = settled(rows_after(repo, hook.cursor), hook.cursor)
        if rows:
            made += _fan_out_hook(repo, hook, rows)
    return made


def settled(rows: list, after: int) -> list:
    """The ROWS up to the first gap in their ids. On PostgreSQL a smaller id can commit after
    a larger one; a gap older than GAP_WAIT is taken for a transaction rolled back."""
    now, expected, kept = utcnow(), after + 1, []
    for row in rows:
        if row.id != expected and now - as_utc(row.at) < dt.timedelta(seconds=GAP_WAIT):
            break
        kept.append(row)
        expected = row.id + 1
    return kept


def _fan_out_hook(repo: Repo, hook, rows: list) -> int:
    """Insert the deliveries of ROWS for HOOK and move its cursor past them, if its cursor is
    still where this replica read it (compare-and-swap); 0 when another got there first."""
    w, made = s.webhooks.c, 0
    with repo.db.write() as conn:
        moved = conn.execute(
            s.webhooks.update()
            .where(w.id == hook.id, w.cursor == hook.cursor, w.removed_at.is_(None))
            .values(cursor=rows[-1].id)
        )
        if moved.rowcount != 1:
            return 0
        now = utcnow()
        for row in rows:
            kind = event_of(row)["type"]
            if hook.events is not None and kind not in hook.events:
                continue
            new = dict(webhook_id=hook.id, event_id=row.id, event_type=kind, status="pending")
            new |= dict(attempts=0, next_at=now)
            made += insert_new(conn, s.webhook_deliveries, new)
    return made


# --- claiming and sending ---------------------------------------------------------------


def claim(repo: Repo) -> tuple | None:
    """A due pending delivery of a live hook, leased to this caller by compare-and-swap on
    `lease_until`: (delivery row, hook row, lease) or None when nothing is due."""
    d, w = s.webhook_deliveries.c, s.webhooks.c
    now = utcnow()
    free = sa.or_(d.lease_until.is_(None), d.lease_until < now)
    due = (
        sa.select(s.webhook_deliveries)
        .join(s.webhooks, w.id == d.webhook_id)
        .where(d.status == "pending", d.next_at <= now, free, w.removed_at.is_(None))
        .order_by(d.next_at, d.id)
        .limit(5)
    )
    with repo.db.read() as conn:
        candidates = list(conn.execute(due))
    for cand in candidates:
        lease = now + dt.timedelta(seconds=LEASE)
        with repo.db.write() as conn:
            got = conn.execute(
                s.webhook_deliveries.update()
                .where(d.id == cand.id, d.status == "pending", free)
                .values(lease_until=lease)
            )
            if got.rowcount == 1:
                hook = conn.execute(sa.select(s.webhooks).where(w.id == cand.webhook_id)).first()
                return cand, hook, lease
    return None


def payload(event_row) -> dict:
    """The event a ref_history row is, as the event stream sends it, with the ref's name also
    under its kind (`channel` for channel.moved, `tag` for tag.moved; `channel` for a fleet's
    fleet.diverged and fleet.converged)."""
    event = event_of(event_row)
    kind = event["type"].split(".")[0]
    if kind in ("channel", "tag", "fleet"):
        event["data"]["channel" if kind == "fleet" else kind] = event["data"]["name"]
    return event


def sign(secret: str, body: bytes) -> str:
    """The signature header's value: sha256=HEX, HMAC-SHA256 of the raw body."""
    digest = hmac.new(secret.encode("utf-8", "surrogatepass"), body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


@dataclass(frozen=True)
class Outcome:
    """What one attempt came to: the answer's status (None: no answer) and why it failed."""

    code: int | None
    error: str | None
    retry: bool  # worth another attempt

    @property
    def delivered(self) -> bool:
        return self.code is not None and 200 <= self.code < 300


def attempt(client, delivery, hook, repo: Repo) -> Outcome:
    """POST DELIVERY's event to HOOK's URL, signed; never raises for the receiver's faults."""
    secret = os.environ.get(hook.secret_env)
    if secret is None:
        why = f"environment variable {hook.secret_env} is not set in the registry's process"
        return Outcome(None, why, retry=False)
    with repo.db.read() as conn:
        r = s.ref_history.c
        row = conn.execute(sa.select(s.ref_history).where(r.id == delivery.event_id)).first()
    if row is None:
        return Outcome(None, f"event {delivery.event_id} is not in the history", retry=False)
    body = json.dumps(payload(row), separators=(",", ":")).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": f"mint-webhooks/{__version__}",
        "X-Mint-Event": delivery.event_type,
        "X-Mint-Delivery": str(delivery.id),
        SIGNATURE_HEADER: sign(secret, body),
    }
    try:  # the answer's status is all that counts: its body is never read
        with client.stream("POST", hook.url, content=body, headers=headers) as answer:
            code = answer.status_code
    except Exception as exc:  # noqa: BLE001 - any failure to reach the receiver is retried
        return Outcome(None, f"{type(exc).__name__}: {exc}"[:500], retry=True)
    if 200 <= code < 300:
        return Outcome(code, None, retry=False)
    retry = code >= 500 or code == 429
    return Outcome(code, f"the receiver answered {code}", retry=retry)


def backoff(attempts: int) -> float:
    """Seconds before attempt ATTEMPTS + 1: 1, 2, 4, ... (at most BACKOFF_MAX)."""
    return min(BACKOFF * 2 ** max(attempts - 1, 0), BACKOFF_MAX)


def record(repo: Repo, delivery, lease, outcome: Outcome) -> None:
    """Write OUTCOME on DELIVERY, if this caller still holds its LEASE."""
    attempts = delivery.attempts + 1
    now = utcnow()
    values = dict(attempts=attempts, response_code=outcome.code, error=outcome.error)
    values["lease_until"] = None
    if outcome.delivered:
        values |= dict(status="delivered", delivered_at=now)
    elif outcome.retry and attempts < MAX_ATTEMPTS:
        values["next_at"] = now + dt.timedelta(seconds=backoff(attempts))
    else:
        values["status"] = "failed"
    d = s.webhook_deliveries.c
    with repo.db.write() as conn:
        conn.execute(
            s.webhook_deliveries.update()
            .where(d.id == delivery.id, d.lease_until == lease, d.status == "pending")
            .values(**values)
        )


def deliver_due(repo: Repo, client, stop: threading.Event | None = None) -> int:
    """Send every delivery due now, one at a time; returns how many attempts were made."""
    n = 0
    while not (stop and stop.is_set()):
        claimed = claim(repo)
        if claimed is None:
            break
        delivery, hook, lease = claimed
        record(repo, delivery, lease, attempt(client, delivery, hook, repo))
        n += 1
    return n


# --- the worker -------------------------------------------------------------------------


class Worker:
    """A thread that fans out and delivers until stopped; one per registry process."""

    def __init__(self, repo: Repo, poll: float = POLL):
        self.repo, self.poll = repo, poll
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mint-webhooks", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = TIMEOUT + 5) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        import httpx

        # trust_env: the process's HTTPS_PROXY, NO_PROXY and SSL_CERT_FILE apply, as for curl.
        with httpx.Client(timeout=TIMEOUT, follow_redirects=False) as client:
            failures = 0
            while not self._stop.is_set():
                try:
                    fan_out(self.repo)
                    deliver_due(self.repo, client, self._stop)
                    failures = 0
                except Exception:  # noqa: BLE001 - a database hiccup: log, look again later
                    failures += 1
                    log.exception("webhook delivery failed (%d in a row); trying again", failures)
                self._stop.wait(min(self.poll * 2**failures, 30.0))


def install(app) -> None:
    """Run a Worker over the app's repository while the app runs (its lifespan)."""
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(application):
        from starlette.concurrency import run_in_threadpool

        worker = Worker(application.state.repo)
        worker.start()
        try:
            async with inner(application) as state:
                yield state
        finally:
            await run_in_threadpool(worker.stop)

    app.router.lifespan_context = lifespan
