"""Administration through the registry: tokens, protected channels and webhooks, one façade
call each (`mint.team`'s operations), with the token's name as who acted.

Only an admin token that is not limited to lines reaches these routes: each acts on the whole
repository (a protection holds on every line, a webhook is sent every line's events, a token
may be given any line), so a token limited to lines could otherwise widen its own reach.

A webhook's secret never travels: a hook names the registry process's environment variable
that holds it, as `mint registry webhook add` does on the server's machine. Through the API
only variables named `MINT_WEBHOOK_*` may be named, so that an admin elsewhere cannot have
the server sign with (and so offer guesses at) another secret of its environment.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from mint import api
from mint.errors import Forbidden, InvalidName
from mint.exchange.received import UNSTORABLE_TEXT
from mint.registry.auth import Admin, RepoDep, need, token_cache
from mint.registry.models import Name, ProtectBody, TokenBody, WebhookBody
from mint.registry.render import MintJSON, answer
from mint.registry.schemas import ERROR_RESPONSES, list_of, model_of
from mint.team.protection import ProtectedChannel
from mint.team.tokens import Identity, NewToken, TokenInfo, parse_role
from mint.team.webhooks import Delivery, Webhook

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES, tags=["administration"])

WEBHOOK_ENV_PREFIX = "MINT_WEBHOOK_"
Limit = Annotated[int, Query(ge=1, le=10_000)]


def whole_repo_admin(who: Admin) -> Identity:
    """An admin token without line globs (403 otherwise)."""
    if who.lines is not None:
        raise Forbidden(who.name, "administer the registry: the token is limited to lines")
    return who


RepoAdmin = Annotated[Identity, Depends(whole_repo_admin)]


def storable(kind: str, name: str) -> str:
    """NAME, unless it holds text no column keeps (a NUL, a lone surrogate): 422 then."""
    if UNSTORABLE_TEXT.search(name):
        raise InvalidName(kind, name, "it holds a NUL or a lone surrogate")
    return name


# --- tokens ------------------------------------------------------------------------------


@router.post("/tokens", response_model=model_of(NewToken))
def token_create(repo: RepoDep, who: RepoAdmin, body: TokenBody) -> MintJSON:
    """A new token; its secret is in this answer only (the registry keeps its hash)."""
    need(who, parse_role(body.role), f"make a {body.role} token")  # never above its own
    made = api.token_create(repo, body.name, body.role, body.lines, by=who.name)
    return answer(made)


@router.get("/tokens", response_model=list_of(TokenInfo))
def token_ls(repo: RepoDep, who: RepoAdmin) -> MintJSON:
    return answer(api.token_ls(repo))


@router.delete("/tokens/{name}", response_model=model_of(TokenInfo))
def token_revoke(request: Request, repo: RepoDep, who: RepoAdmin, name: Name) -> MintJSON:
    revoked = api.token_revoke(repo, storable("token", name))
    token_cache(request.app).clear()  # refused from this replica's next request on
    return answer(revoked)


# --- protected channels ------------------------------------------------------------------


@router.post("/protected", response_model=model_of(ProtectedChannel))
def protect(repo: RepoDep, who: RepoAdmin, body: ProtectBody) -> MintJSON:
    protected = api.protect(
        repo, body.channel, body.role, by=who.name, signed=body.signed, keys=body.keys
    )
    return answer(protected)


@router.get("/protected", response_model=list_of(ProtectedChannel))
def protected_ls(repo: RepoDep, who: RepoAdmin) -> MintJSON:
    return answer(api.protected_ls(repo))


@router.delete("/protected/{channel}", response_model=model_of(ProtectedChannel) | None)
def unprotect(repo: RepoDep, who: RepoAdmin, channel: Name) -> MintJSON:
    """What the protection was, or null when the channel was not protected."""
    return answer(api.unprotect(repo, storable("channel", channel)))


# --- webhooks ----------------------------------------------------------------------------


@router.post("/webhooks", response_model=model_of(Webhook))
def webhook_add(repo: RepoDep, who: RepoAdmin, body: WebhookBody) -> MintJSON:
    if not body.secret_env.startswith(WEBHOOK_ENV_PREFIX):
        why = f"through the registry, a hook signs with one of its variables {WEBHOOK_ENV_PREFIX}*"
        raise InvalidName("environment variable", body.secret_env, why)
    hook = api.webhook_add(repo, body.url, body.secret_env, body.events, by=who.name)
    return answer(hook)


@router.get("/webhooks", response_model=list_of(Webhook))
def webhook_ls(repo: RepoDep, who: RepoAdmin) -> MintJSON:
    return answer(api.webhook_ls(repo))


@router.get("/webhooks/deliveries", response_model=list_of(Delivery))
def webhook_deliveries_all(repo: RepoDep, who: RepoAdmin, limit: Limit = 100) -> MintJSON:
    """The LIMIT newest deliveries of every hook, newest first."""
    return answer(api.webhook_deliveries(repo, None, limit))


@router.delete("/webhooks/{hook_id}", response_model=model_of(Webhook))
def webhook_rm(repo: RepoDep, who: RepoAdmin, hook_id: int) -> MintJSON:
    return answer(api.webhook_rm(repo, hook_id))


@router.get("/webhooks/{hook_id}/deliveries", response_model=list_of(Delivery))
def webhook_deliveries(
    repo: RepoDep, who: RepoAdmin, hook_id: int, limit: Limit = 100
) -> MintJSON:
    """The LIMIT newest deliveries of the hook HOOK_ID, newest first."""
    return answer(api.webhook_deliveries(repo, hook_id, limit))
