"""Tokens, protected channels and webhooks on a registry: the same operations, signatures and
results as `mint.team`, one request each to the registry's admin routes (`routes_team`).

The registry records the token's identity as who acted, so `by=` is not sent. A webhook's
secret is never sent either: SECRET_ENV names the registry process's environment variable
that holds it, as it does when the hook is added on the server's machine (through the
registry, only variables named `MINT_WEBHOOK_*`).
"""

from __future__ import annotations

from mint.exchange.wire import decode, decode_list
from mint.remote.http import segment
from mint.remote.repo import RemoteRepo
from mint.team.protection import ProtectedChannel
from mint.team.tokens import NewToken, TokenInfo
from mint.team.webhooks import Delivery, Webhook


def token_create(
    repo: RemoteRepo, name: str, role: str, lines: list[str] | None = None, *, by: str
) -> NewToken:
    """Make a token NAME with ROLE (and line globs) on the registry; its secret is returned
    once."""
    body = {"name": name, "role": role, "lines": list(lines) if lines else None}
    return decode(NewToken, repo.client.post("/tokens", body))


def token_ls(repo: RemoteRepo) -> list[TokenInfo]:
    """Every token of the registry, revoked ones too (never their secrets)."""
    return decode_list(TokenInfo, repo.client.get("/tokens"))


def token_revoke(repo: RemoteRepo, name: str) -> TokenInfo:
    """Revoke the registry's token NAME at once."""
    return decode(TokenInfo, repo.client.delete(f"/tokens/{segment(name)}"))


def protect(
    repo: RemoteRepo,
    channel: str,
    role: str = "maintainer",
    *,
    by: str,
    signed: bool = False,
    keys: list[str] | None = None,
) -> ProtectedChannel:
    """Moving CHANNEL (on every line) on the registry now needs ROLE (and with SIGNED, a
    signature by one of the registry's trusted keys: one of KEYS, if named)."""
    body: dict = {"channel": channel, "role": role}
    if signed:  # sent only when asked: a registry that predates it still takes the rest
        body["signed"] = True
    if keys:
        body["keys"] = list(keys)
    return decode(ProtectedChannel, repo.client.post("/protected", body))


def unprotect(repo: RemoteRepo, channel: str) -> ProtectedChannel | None:
    """CHANNEL moves for writers again; what the protection was (None: there was none)."""
    was = repo.client.delete(f"/protected/{segment(channel)}")
    return decode(ProtectedChannel, was) if was is not None else None


def protected_ls(repo: RemoteRepo) -> list[ProtectedChannel]:
    return decode_list(ProtectedChannel, repo.client.get("/protected"))


def webhook_add(
    repo: RemoteRepo,
    url: str,
    secret_env: str,
    events: list[str] | tuple[str, ...] | None = None,
    *,
    by: str,
) -> Webhook:
    """Register URL for EVENTS (None: all) on the registry, signed with the secret in the
    registry process's environment variable SECRET_ENV."""
    body = {"url": url, "secret_env": secret_env, "events": list(events) if events else None}
    return decode(Webhook, repo.client.post("/webhooks", body))


def webhook_ls(repo: RemoteRepo) -> list[Webhook]:
    """Every hook of the registry, oldest first, removed ones too."""
    return decode_list(Webhook, repo.client.get("/webhooks"))


def webhook_rm(repo: RemoteRepo, hook_id: int) -> Webhook:
    """Remove the registry's hook HOOK_ID."""
    return decode(Webhook, repo.client.delete(f"/webhooks/{int(hook_id)}"))


def webhook_deliveries(
    repo: RemoteRepo, hook_id: int | None = None, limit: int = 100
) -> list[Delivery]:
    """The LIMIT newest deliveries (of the hook HOOK_ID, or of all), newest first."""
    path = "/webhooks/deliveries" if hook_id is None else f"/webhooks/{int(hook_id)}/deliveries"
    return decode_list(Delivery, repo.client.get(path, limit=max(1, int(limit))))
