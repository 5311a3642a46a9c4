"""Webhooks, the user's side: a hook is a URL, the name of an environment variable that holds
its secret (the secret itself is never stored), and the event types it wants (None: all). Its
`cursor` is the last `ref_history` id it has seen. Adding, listing and removing hooks and
reading their deliveries are user operations (`mint registry webhook`); the delivery worker
that fans events out and POSTs them runs inside `mint registry serve`
(`mint.registry.webhooks`). docs/webhooks.md describes the payload and the headers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

import sqlalchemy as sa

from mint import schema as s
from mint.errors import InvalidName, InvalidWebhookUrl, UnknownWebhook
from mint.ids import iso, utcnow
from mint.refs.events import EVENT_TYPES, newest_id
from mint.repo import Repo

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")


@dataclass(frozen=True)
class Webhook:
    """A registered hook. `events` None: every event type. `secret_env` names the registry's
    environment variable holding the secret (never the secret)."""

    id: int
    url: str
    secret_env: str
    events: list[str] | None
    cursor: int
    created_at: str
    created_by: str
    removed_at: str | None


@dataclass(frozen=True)
class Delivery:
    """One event for one hook: pending, delivered or failed."""

    id: int
    webhook_id: int
    event_id: int
    event_type: str
    status: str
    attempts: int
    next_at: str | None
    response_code: int | None
    error: str | None
    delivered_at: str | None


def check_url(url: str) -> str:
    """URL, if it is an http(s) URL with a host; InvalidWebhookUrl otherwise."""
    if not isinstance(url, str) or len(url) > 2000 or any(c.isspace() for c in url):
        raise InvalidWebhookUrl(str(url)[:200], "give one http(s) URL, without spaces")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise InvalidWebhookUrl(url, str(exc)) from None
    if parts.scheme not in ("http", "https"):
        raise InvalidWebhookUrl(url, "only http and https URLs are delivered to")
    if not parts.hostname:
        raise InvalidWebhookUrl(url, "it names no host")
    return url


def check_env_name(name: str) -> str:
    if not isinstance(name, str) or not _ENV_NAME.match(name):
        raise InvalidName(
            "environment variable", str(name), "use letters, digits and _, not first a digit"
        )
    return name


def check_events(events: list[str] | tuple[str, ...] | None) -> list[str] | None:
    """The event types asked for, sorted; None or empty: every type."""
    if not events:
        return None
    for e in events:
        if e not in EVENT_TYPES:
            raise InvalidName("event type", str(e), f"use {', '.join(EVENT_TYPES)}")
    return sorted(set(events))


def webhook_add(
    repo: Repo,
    url: str,
    secret_env: str,
    events: list[str] | tuple[str, ...] | None = None,
    *,
    by: str,
) -> Webhook:
    """Register URL for EVENTS (None: all), signed with the secret in the registry process's
    environment variable SECRET_ENV. It gets the events written from now on."""
    row = dict(
        url=check_url(url),
        secret_env=check_env_name(secret_env),
        events=check_events(events),
        created_at=utcnow(),
        created_by=by,
        removed_at=None,
    )
    with repo.db.write() as conn:
        row["cursor"] = newest_id(conn)
        hook_id = conn.execute(s.webhooks.insert().values(**row)).inserted_primary_key[0]
        return _webhook(_hook_row(conn, hook_id))


def webhook_ls(repo: Repo) -> list[Webhook]:
    """Every hook, oldest first, removed ones too (marked by `removed_at`)."""
    with repo.db.read() as conn:
        rows = conn.execute(sa.select(s.webhooks).order_by(s.webhooks.c.id))
        return [_webhook(r) for r in rows]


def webhook_rm(repo: Repo, hook_id: int) -> Webhook:
    """Remove the hook HOOK_ID: nothing more is sent to it, and its pending deliveries fail.
    Removing a removed hook changes nothing."""
    w, d = s.webhooks.c, s.webhook_deliveries.c
    with repo.db.write() as conn:
        if _hook_row(conn, hook_id) is None:
            raise UnknownWebhook(hook_id)
        now = utcnow()
        done = conn.execute(
            s.webhooks.update()
            .where(w.id == hook_id, w.removed_at.is_(None))
            .values(removed_at=now)
        )
        if done.rowcount:
            conn.execute(
                s.webhook_deliveries.update()
                .where(d.webhook_id == hook_id, d.status == "pending")
                .values(status="failed", error="the webhook was removed", lease_until=None)
            )
        return _webhook(_hook_row(conn, hook_id))


def webhook_deliveries(repo: Repo, hook_id: int | None = None, limit: int = 100) -> list[Delivery]:
    """The LIMIT newest deliveries (of the hook HOOK_ID, or of all), newest first."""
    d = s.webhook_deliveries.c
    q = sa.select(s.webhook_deliveries).order_by(d.id.desc()).limit(max(1, int(limit)))
    with repo.db.read() as conn:
        if hook_id is not None:
            if _hook_row(conn, hook_id) is None:
                raise UnknownWebhook(hook_id)
            q = q.where(d.webhook_id == hook_id)
        return [_delivery(r) for r in conn.execute(q)]


def _hook_row(conn, hook_id):
    if not isinstance(hook_id, int) or isinstance(hook_id, bool) or not 0 < hook_id < 2**31:
        return None
    return conn.execute(sa.select(s.webhooks).where(s.webhooks.c.id == hook_id)).first()


def _webhook(r) -> Webhook:
    return Webhook(
        r.id,
        r.url,
        r.secret_env,
        r.events,
        r.cursor,
        iso(r.created_at),
        r.created_by,
        iso(r.removed_at),
    )


def _delivery(r) -> Delivery:
    return Delivery(
        r.id,
        r.webhook_id,
        r.event_id,
        r.event_type,
        r.status,
        r.attempts,
        iso(r.next_at) if r.status == "pending" else None,
        r.response_code,
        r.error,
        iso(r.delivered_at),
    )
