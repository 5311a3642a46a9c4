"""The signing errors (mint.signing, signed moves): part of `mint.errors`, which re-exports them.
No message quotes a key's bytes."""

from __future__ import annotations

from mint.errors import Forbidden, MintError, RefExists


class SigningUnavailable(MintError, ImportError):
    """Signing needs the sign extra (cryptography, with model-signing for interop)."""


class InvalidKey(MintError, ValueError):
    def __init__(self, path: str, why: str):
        super().__init__(f"cannot use the key {path}: {why}")
        self.path, self.why = path, why


class KeyExists(RefExists):
    """A trusted key of that name, or the same key under another name."""


class InvalidSignature(MintError, ValueError):
    def __init__(self, path: str, why: str):
        super().__init__(f"signature {path}: {why}")
        self.path, self.why = path, why


class NotVerified(MintError):
    def __init__(self, rev: str, why: str):
        super().__init__(f"{rev} is not verified: {why}")
        self.rev, self.why = rev, why


class UnsignedMembers(NotVerified):
    """A set to sign (--sign) whose members are not all signed by a trusted key: a set's
    signature covers its members' signatures."""

    def __init__(self, rev: str, why: str):
        MintError.__init__(self, f"cannot sign set {rev}: {why}")
        self.rev, self.why = rev, why


class MoveNotSigned(Forbidden):
    """A move without a signature that verifies with a trusted key (unsigned: on a channel
    protected as signed)."""

    def __init__(self, ref: str, why: str):
        MintError.__init__(self, f"move of {ref} refused: {why}")
        self.ref, self.why = ref, why


class MoveStatementMismatch(MoveNotSigned):
    """A signed statement of another move (line, channel, commit, state): a replay; 409."""
