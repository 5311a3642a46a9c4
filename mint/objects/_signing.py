"""Signing (issue 23): keys, signers and what `verify` found.

Defined plain; `mint.objects` makes each a frozen dataclass on first use."""

from __future__ import annotations

from dataclasses import field

from mint.objects._lazy import frozen


@frozen
class SigningKey:
    """A public key the repository trusts, under a name."""

    name: str
    fingerprint: str  # sha256 of its PEM: the hint a model-signing bundle carries
    added_at: str
    added_by: str
    public_key: str = ""  # its PEM (public: a client verifies a folder with a registry's keys)
    # What it may sign (mint.signing.trust), each None for no limit: purposes among commits,
    # sets and moves; line globs; channel names.
    purposes: list[str] | None = None
    lines: list[str] | None = None
    channels: list[str] | None = None


@frozen
class StoredSignature:
    """A kept bundle that breaks the rules a bundle is kept by now (mint.signing.stored): an
    older mint's, or one whose key was trusted after it was kept and that does not verify."""

    commit: str
    sha256: str  # the bundle's, as `commit_signatures` names it
    why: str


@frozen
class SignaturePrune:
    """What `signature prune` found, and whether it removed it (not on a dry run)."""

    signatures: list[StoredSignature]
    removed: bool


@frozen
class GeneratedKey:
    """A key pair `key generate` wrote: where, and the public key's fingerprint."""

    private_key: str
    public_key: str
    fingerprint: str
    encrypted: bool


@frozen
class Signer:
    """A signature that verified: the trusted key that made it."""

    key: str  # the key's name here ("" for a key given as a file)
    fingerprint: str
    bound: bool  # the bundle names the commit (mint --sign), not only its files


@frozen
class Verification:
    """What `verify` found: the commit (or folder) and who signed it."""

    target: str
    signers: list[Signer]
    # A set: each member's signature that the set's signature names, verified (one a member).
    members: list[MemberVerified] = field(default_factory=list)


@frozen
class MemberVerified:
    """A set's member whose signature verified: its folder in the set (router, summary or an
    expert's label), its commit, and the trusted key that signed it."""

    label: str
    commit: str
    signer: Signer
