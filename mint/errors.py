"""Every error mint raises on purpose. The CLI maps each to one line and an exit code."""

from __future__ import annotations


class MintError(Exception):
    """Base of all mint errors. `hint` says what to do about it; `exit_code` is the CLI's."""

    exit_code = 1
    hint: str | None = None

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        if hint is not None:
            self.hint = hint


# --- repository and database -------------------------------------------------


class RepoNotFound(MintError, FileNotFoundError):
    hint = "run `mint init` first, or pass --repo DIR"


class RepoExists(MintError, FileExistsError):
    pass


class SchemaOutdated(MintError):
    hint = "run `mint db upgrade`"


class DatabaseUnavailable(MintError, ConnectionError):
    pass


# --- names and revisions -----------------------------------------------------


class InvalidName(MintError, ValueError):
    def __init__(self, kind: str, name: str, why: str):
        super().__init__(f"invalid {kind} name {name!r}: {why}")
        self.kind, self.name = kind, name


class RevisionNotFound(MintError, LookupError):
    def __init__(self, rev: str, why: str = "unknown revision"):
        super().__init__(f"{why}: {rev!r}")
        self.rev = rev


class AmbiguousRevision(MintError, LookupError):
    def __init__(self, rev: str, candidates: list[str]):
        shown = ", ".join(c[:12] for c in candidates[:5])
        super().__init__(f"ambiguous revision {rev!r}: matches {shown}")
        self.rev, self.candidates = rev, candidates
        self.hint = "give more hex digits"


class RefConflict(MintError):
    """A compare-and-swap on a ref lost: someone else moved it first."""

    def __init__(self, ref: str, expected: str | None, found: str | None):
        exp = expected[:12] if expected else "nothing"
        got = found[:12] if found else "nothing"
        super().__init__(f"{ref} moved while updating (expected {exp}, found {got})")
        self.ref, self.expected, self.found = ref, expected, found
        self.hint = "another writer got there first; run the command again"


class RefExists(MintError, FileExistsError):
    pass


class WrongKind(MintError, TypeError):
    pass


# --- inputs ------------------------------------------------------------------


class InvalidAdapter(MintError, ValueError):
    def __init__(self, path: object, why: str, *, hint: str | None = None):
        super().__init__(f"invalid adapter {path}: {why}", hint=hint)
        self.path, self.why = path, why


class PickleRefused(InvalidAdapter):
    def __init__(self, path: object, filename: str):
        super().__init__(
            path,
            f"{filename} is a pickle; mint never loads pickled weights",
            hint="convert it: load it yourself where you trust it and "
            "`model.save_pretrained(dir, safe_serialization=True)` to write safetensors",
        )


class InvalidSafetensors(InvalidAdapter):
    pass


class BaseMismatch(MintError, ValueError):
    pass


class UnknownBase(MintError, LookupError):
    hint = "register it with `mint base add NAME PATH`, or pass --base NAME"


class InvalidConfig(MintError, ValueError):
    pass


class DestinationNotEmpty(MintError, FileExistsError):
    pass


class UnsafePath(MintError, ValueError):
    pass


# --- integrity ---------------------------------------------------------------
# The store sits below mint and cannot import this module, so its two errors live
# there; they are re-exported here so that callers have one place to look.
from mint.store import BlobCorrupt, BlobMissing, StoreError  # noqa: E402,F401  (re-exported)


# --- the hub -------------------------------------------------------------------


class HubError(MintError):
    """The hub could not give what a pull asked for."""


class InvalidHubUri(HubError, ValueError):
    hint = "write hf://ORG/REPO or hf://ORG/REPO@REVISION"


class HubUnreachable(HubError, ConnectionError):
    hint = "check HF_ENDPOINT and the network; with HF_HUB_OFFLINE=1 mint pulls revisions already in the HF cache"


class NeedsNetwork(HubError, ConnectionError):
    hint = "unset HF_HUB_OFFLINE to download it"


class HubRepoNotFound(HubError, LookupError):
    hint = "check the name; a private repo needs HF_TOKEN"


class HubRevisionNotFound(HubError, LookupError):
    pass


class HubGated(HubError, PermissionError):
    hint = "accept the repo's conditions on the hub, then set HF_TOKEN to a token of that account"


# --- gates (the promotion issue) ---------------------------------------------


class GateRefused(MintError):
    """The promotion gate said no. Carries the report for the CLI to render."""

    exit_code = 3

    def __init__(self, message: str, report: object):
        super().__init__(message)
        self.report = report


class EvaluationFailed(MintError):
    pass
