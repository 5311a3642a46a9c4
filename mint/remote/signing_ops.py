"""Signing through the registry (issue 23): the keys it trusts, and verify against them.

A key is checked here before it is sent: a private key given by mistake never leaves this
machine (`mint.signing.keys.parse_public` refuses it), and only the canonical public PEM
travels.
"""

from __future__ import annotations

from mint.exchange.wire import decode, decode_list
from mint.objects import SignaturePrune, SigningKey, Verification
from mint.remote.http import segment
from mint.remote.repo import RemoteRepo
from mint.signing.keys import parse_public


def key_add(
    repo: RemoteRepo,
    name: str,
    public_key: str,
    *,
    by: str,
    purposes=None,
    lines: list[str] | None = None,
    channels: list[str] | None = None,
) -> SigningKey:
    """Trust PUBLIC_KEY (PEM) on the registry under NAME (an admin's), to sign PURPOSES, on
    LINES, of CHANNELS (each None: no limit)."""
    pem = parse_public(public_key).decode()
    body = {"name": name, "public_key": pem, **_limits(purposes, lines, channels)}
    return decode(SigningKey, repo.client.post("/keys", body))


def key_limit(repo: RemoteRepo, name: str, *, purposes=None, lines=None, channels=None):
    """Limit what the registry's key NAME may sign (an admin's)."""
    body = _limits(purposes, lines, channels)
    return decode(SigningKey, repo.client.post(f"/keys/{segment(name)}/limits", body))


def _limits(purposes, lines, channels) -> dict:
    """The limits as the registry takes them (checked here first: one line, no request)."""
    from mint.signing.trust import check_limits

    return check_limits(purposes, lines, channels)


def key_ls(repo: RemoteRepo) -> list[SigningKey]:
    """The registry's trusted keys, by name."""
    return decode_list(SigningKey, repo.client.get("/keys"))


def key_rm(repo: RemoteRepo, name: str) -> SigningKey:
    """Stop trusting the registry's key NAME (an admin's)."""
    return decode(SigningKey, repo.client.delete(f"/keys/{segment(name)}"))


def attach_signatures(repo: RemoteRepo, commit: str, bundles: list[str]) -> int:
    """Send BUNDLES, made on this machine, to be kept with COMMIT on the registry, which
    checks them as those a push brings (POST /objects: a writer's, on lines it may push).
    Returns how many it kept."""
    from mint.remote.transfer_client import post_objects

    signatures = [{"commit": commit, "bundle": b} for b in bundles]
    empty = {"bases": [], "commits": [], "evaluations": []}
    return post_objects(repo, {**empty, "signatures": signatures}).get("signatures", 0)


def signature_prune(repo: RemoteRepo, *, dry_run: bool = False) -> SignaturePrune:
    """Remove the registry's kept bundles that break its rules (an admin's)."""
    return decode(SignaturePrune, repo.client.post("/signatures/prune", {"dry_run": dry_run}))


def verify(
    repo: RemoteRepo, rev: str, *, key: str | None = None, public_key: str | None = None
) -> Verification:
    """Which of the registry's trusted keys (or KEY, or PUBLIC_KEY) signed REV there."""
    pem = parse_public(public_key).decode() if public_key is not None else None
    body = {"rev": rev, "key": key, "public_key": pem}
    return decode(Verification, repo.client.post("/verify", body))
