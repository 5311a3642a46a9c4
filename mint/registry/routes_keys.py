"""Signing on the registry (issue 23): the public keys it trusts (an admin adds and removes
them; any reader lists them), verify, which says which of them signed a commit, and a
channel's history with what each move's signature says."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import Field, StringConstraints

from mint import api
from mint.objects import SignaturePrune, SigningKey, Verification
from mint.registry.auth import Reader, RepoDep, check_commit, check_line
from mint.registry.models import Body, Name
from mint.registry.render import MintJSON, answer
from mint.registry.routes_team import RepoAdmin
from mint.registry.schemas import ERROR_RESPONSES, list_of, model_of
from mint.registry.web.channel_api import LAST_ENTRY
from mint.signing.moves import SignedMove

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES, tags=["signing"])

Pem = Annotated[str, StringConstraints(min_length=1, max_length=16 * 1024)]


class LimitsBody(Body):
    """What a key may sign (mint.signing.trust); each null for no limit."""

    purposes: Annotated[list[Name], Field(max_length=3)] | None = None  # commits, sets, moves
    lines: Annotated[list[Name], Field(max_length=1000)] | None = None  # line globs
    channels: Annotated[list[Name], Field(max_length=1000)] | None = None


class KeyBody(LimitsBody):
    name: Name
    public_key: Pem  # an elliptic-curve public key, PEM; a private one is refused


class VerifyBody(Body):
    rev: Annotated[str, StringConstraints(min_length=1, max_length=300)]
    key: Name | None = None
    public_key: Pem | None = None


@router.post("/keys", response_model=model_of(SigningKey))
def key_add(repo: RepoDep, who: RepoAdmin, body: KeyBody) -> MintJSON:
    """Trust a public key under a name (an admin's)."""
    limits = body.model_dump(include={"purposes", "lines", "channels"})
    return answer(api.key_add(repo, body.name, body.public_key, by=who.name, **limits))


@router.get("/keys", response_model=list_of(SigningKey))
def key_ls(repo: RepoDep, who: Reader) -> MintJSON:
    return answer(api.key_ls(repo))


@router.post("/keys/{name}/limits", response_model=model_of(SigningKey))
def key_limit(repo: RepoDep, who: RepoAdmin, name: Name, body: LimitsBody) -> MintJSON:
    """Limit what the trusted key NAME may sign, replacing its limits (an admin's)."""
    return answer(api.key_limit(repo, name, **body.model_dump()))


@router.delete("/keys/{name}", response_model=model_of(SigningKey))
def key_rm(repo: RepoDep, who: RepoAdmin, name: Name) -> MintJSON:
    return answer(api.key_rm(repo, name))


class PruneBody(Body):
    dry_run: bool = False


@router.post("/signatures/prune", response_model=model_of(SignaturePrune))
def signature_prune(repo: RepoDep, who: RepoAdmin, body: PruneBody) -> MintJSON:
    """Remove every kept signature that breaks the rules a bundle is kept by (an admin's):
    one an older version kept unchecked, or one whose key was trusted after it was kept and
    that does not verify with it. With dry_run, only say which."""
    return answer(api.signature_prune(repo, dry_run=body.dry_run))


@router.post("/verify", response_model=model_of(Verification))
def verify(repo: RepoDep, who: Reader, body: VerifyBody) -> MintJSON:
    """Which trusted keys (or KEY, or PUBLIC_KEY) signed REV; 400 NotVerified if none did.
    A token limited to lines verifies only what it may read."""
    check_commit(repo, who, api.resolve(repo, body.rev))
    return answer(api.verify(repo, body.rev, key=body.key, public_key=body.public_key))


@router.get("/history/verified", response_model=list_of(SignedMove))
def history_verify(
    repo: RepoDep,
    who: Reader,
    ref: Annotated[str, StringConstraints(min_length=1, max_length=500), Query()],
    n: Annotated[int | None, Query(ge=1, le=100_000)] = None,
    before: Annotated[int | None, Query(ge=0, le=2**62)] = None,
) -> MintJSON:
    """`history` of LINE@CHANNEL, each move with what its signature says against the
    registry's trusted keys."""
    check_line(who, ref.partition("@")[0])
    if before is not None:
        before = min(before, LAST_ENTRY)  # no entry is later; more overflows the column
    return answer(api.history_verify(repo, ref, n=n, before=before))
