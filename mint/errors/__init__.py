"""Every error mint raises on purpose, each with its data as attributes.

Messages say what went wrong in the library's words; they never name a CLI flag. The CLI
(`mint.cli._errors`) maps each class to one line, a hint and an exit code.
"""

from __future__ import annotations

import functools
import inspect

# The store sits below mint and cannot import this module: its errors derive from its own
# base, and are re-exported here so that callers have one place to look.
from mint.store.errors import BlobChanged as BlobChanged
from mint.store.errors import BlobCorrupt as BlobCorrupt
from mint.store.errors import BlobMissing as BlobMissing
from mint.store.errors import StoreError as StoreError
from mint.store.errors import StoreUnavailable as StoreUnavailable


class MintError(Exception):
    """Base of all mint errors."""


@functools.cache
def error_fields(cls: type) -> tuple[str, ...]:
    """The data of error class CLS: its constructor's named parameters, each kept as the
    attribute of that name (a `message` parameter is the error's text). The registry sends
    them as an error's `detail` and the client calls the constructor with them again, so an
    error crosses the wire whole; a class without a constructor of its own has only its text."""
    if cls.__init__ in (Exception.__init__, BaseException.__init__, object.__init__):
        return ()
    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return ()
    plain = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(p for p, v in params.items() if p != "self" and v.kind in plain)


# --- repository and database -------------------------------------------------


class RepoNotFound(MintError, FileNotFoundError):
    def __init__(self, message: str, given: str | None = None):
        super().__init__(message)
        self.given = given  # the path as the caller wrote it


class RepoExists(MintError, FileExistsError):
    pass


class SchemaOutdated(MintError):
    def __init__(self, current: str | None, head: str):
        super().__init__(
            f"the metadata database is at schema {current or 'none'}, this mint needs {head}"
        )
        self.current, self.head = current, head


class DatabaseUnavailable(MintError, ConnectionError):
    def __init__(self, url: str, why: str, *, missing_database: bool = False):
        super().__init__(f"cannot reach the metadata database {url}: {why}")
        self.url, self.why, self.missing_database = url, why, missing_database


# --- names and revisions -----------------------------------------------------


class InvalidName(MintError, ValueError):
    def __init__(self, kind: str, name: str, why: str):
        super().__init__(f"invalid {kind} name {name!r}: {why}")
        self.kind, self.name, self.why = kind, name, why


class RevisionNotFound(MintError, LookupError):
    """No revision, line, tag, channel or contract of that name; NEAR holds the known names
    closest to it (spelled as the caller would write them), closest first."""

    def __init__(self, rev: str, why: str = "unknown revision", near: list[str] | None = None):
        super().__init__(f"{why}: {rev!r}")
        self.rev, self.why, self.near = rev, why, near


class AmbiguousRevision(MintError, LookupError):
    def __init__(self, rev: str, candidates: list[str]):
        shown = ", ".join(c[:12] for c in candidates[:5])
        super().__init__(f"ambiguous revision {rev!r}: matches {shown}")
        self.rev, self.candidates = rev, candidates


class RefConflict(MintError):
    """A compare-and-swap on a ref lost: someone else moved it first."""

    def __init__(self, ref: str, expected: str | None, found: str | None):
        exp = expected[:12] if expected else "nothing"
        got = found[:12] if found else "nothing"
        super().__init__(f"{ref} moved while updating (expected {exp}, found {got})")
        self.ref, self.expected, self.found = ref, expected, found


class RefExists(MintError, FileExistsError):
    pass


class TagExists(RefExists):
    """A tag already points elsewhere; moving it needs force."""

    def __init__(self, ref: str, target: str):
        super().__init__(f"tag {ref} already points at {target[:12]}")
        self.ref, self.target = ref, target


class ReservedName(RefExists):
    """A tag may not take a channel's name (one on its line, a protected one, or one a
    contract guards), and a channel may not take a tag's: LINE@NAME must mean one thing."""

    def __init__(self, ref: str, kind: str, why: str):
        super().__init__(f"{ref} may not be a {kind}: {why}")
        self.ref, self.kind, self.why = ref, kind, why


class ChannelTypo(MintError, LookupError):
    """A promote would create a channel whose name is a few edits from a known one."""

    def __init__(self, ref: str, near: list[str]):
        guess = " or ".join(near[:3])
        super().__init__(f"{ref} is no channel yet; did you mean {guess}?")
        self.ref, self.near = ref, near


class ChannelGuarded(MintError, PermissionError):
    """A protected channel, or one a contract guards, is never removed."""

    def __init__(self, ref: str, why: str):
        super().__init__(f"{ref} may not be removed: {why}")
        self.ref, self.why = ref, why


class BaseExists(RefExists):
    def __init__(self, name: str, fingerprint: str):
        super().__init__(
            f"base {name} is already registered with another config "
            f"(fingerprint {fingerprint[:12]})"
        )
        self.name, self.fingerprint = name, fingerprint


class WrongKind(MintError, TypeError):
    pass


# --- inputs ------------------------------------------------------------------


class InvalidAdapter(MintError, ValueError):
    def __init__(self, path: object, why: str):
        super().__init__(f"invalid adapter {path}: {why}")
        self.path, self.why = path, why


class NotAnAdapter(InvalidAdapter):
    """The folder lacks the files PEFT's save_pretrained writes."""


class PickleRefused(InvalidAdapter):
    def __init__(self, path: object, filename: str):
        super().__init__(path, f"{filename} is a pickle; mint never loads pickled weights")
        self.filename = filename


class InvalidSafetensors(InvalidAdapter):
    pass


class BaseMismatch(MintError, ValueError):
    pass


class UnknownBase(MintError, LookupError):
    def __init__(self, name: str | None, why: str | None = None, known: list[str] | None = None):
        if why is None:
            why = (
                "the adapter names no base_model_name_or_path"
                if name is None
                else f"base {name!r} is not registered"
            )
        super().__init__(why)
        self.name, self.why, self.known = name, why, known  # known: the registered bases


class BaseFolderMismatch(BaseMismatch):
    """The base folder given to the runtime is not the base the set was committed against."""

    def __init__(self, what: str, expected: str, path: str, found: str):
        super().__init__(
            f"{what} was built for base {expected[:12]}, but {path} has fingerprint {found[:12]}"
        )
        self.what, self.expected, self.path, self.found = what, expected, path, found


class BaseFolderUnknown(UnknownBase):
    """The runtime needs the base's folder, and `mint base add` recorded none."""

    def __init__(self, name: str):
        super().__init__(name, f"base {name} has no known folder")


class InvalidConfig(MintError, ValueError):
    pass


class DestinationNotEmpty(MintError, FileExistsError):
    def __init__(self, path: str):
        super().__init__(f"{path} exists and is not an empty folder")
        self.path = path


class NotACheckout(DestinationNotEmpty):
    def __init__(self, path: str, line: str):
        why = "a file of its own, or one changed, added or removed since"
        MintError.__init__(self, f"{path} holds no checkout of {line} as mint wrote it ({why})")
        self.path, self.line = path, line


class UnsafePath(MintError, ValueError):
    def __init__(self, path: str):
        super().__init__(f"unsafe file path {path!r}: paths must stay inside the folder")
        self.path = path


# --- the hub -------------------------------------------------------------------


class HubError(MintError):
    """The hub could not give what a pull asked for."""


class InvalidHubUri(HubError, ValueError):
    pass


class HubUnreachable(HubError, ConnectionError):
    pass


class NeedsNetwork(HubError, ConnectionError):
    pass


class HubRepoNotFound(HubError, LookupError):
    pass


class HubRevisionNotFound(HubError, LookupError):
    def __init__(self, message: str, known: list[str] | None = None):
        super().__init__(message)
        self.known = known  # the repo's branches and tags, when they could be listed


class HubGated(HubError, PermissionError):
    pass


class NotAHubAdapter(NotAnAdapter):
    """A hub repo (or a set's folder in it) holds neither a PEFT adapter nor a mol.toml."""


class PullLineConflict(HubError):
    """The line a pull would commit on cannot take it (wrong kind, taken tag, invalid name)."""

    def __init__(self, line: str, why: str):
        super().__init__(f"cannot pull onto line {line}: {why}")
        self.line, self.why = line, why


# --- contracts and gates -------------------------------------------------------


class GateRefused(MintError):
    """The promotion gate said no. Carries the report for the CLI to render."""

    def __init__(self, report):
        where = f"{report.line}@{report.channel}"
        failed = next((c for c in report.checks if not c.ok), None)
        why = f": {failed.check}: {failed.found} (needs {failed.required})" if failed else ""
        super().__init__(f"gate refused {report.commit_id[:12]} for {where}{why}")
        self.report = report


class ForceNeedsReason(MintError, ValueError):
    def __init__(self, channel: str):
        super().__init__(f"forcing {channel} past its gate needs a reason, which history records")
        self.channel = channel


class NothingToRollBack(MintError, LookupError):
    def __init__(self, ref: str, holders: int):
        what = "one holder" if holders <= 1 else f"{holders} holders, and this is the oldest"
        super().__init__(f"nothing to roll back to: {ref} has had {what}")
        self.ref, self.holders = ref, holders


class EvaluationFailed(MintError):
    pass


class CanaryOpen(MintError):
    """A channel serves at most one canary at a time."""

    def __init__(self, ref: str, canary_id: int, candidate: str):
        super().__init__(f"{ref} already has an open canary (#{canary_id}, {candidate[:12]})")
        self.ref, self.canary_id, self.candidate = ref, canary_id, candidate


class NoCanary(MintError, LookupError):
    def __init__(self, ref: str, why: str = "no open canary"):
        super().__init__(f"{why} on {ref}")
        self.ref, self.why = ref, why


# --- inputs of reads and forms ------------------------------------------------------


class InvalidTime(MintError, ValueError):
    def __init__(self, text: str):
        super().__init__(f"not a time: {text!r} (an ISO 8601 time, or an age: 10m, 2h, 1d)")
        self.text = text


class InvalidForm(MintError, ValueError):
    """A web page's form body that is not one of ours (too large, too many fields)."""

    def __init__(self, why: str):
        super().__init__(f"invalid form: {why}")
        self.why = why


class InvalidQuery(MintError, ValueError):
    """A search condition that is not one (`mint search`, GET /search)."""

    def __init__(self, text: str, why: str):
        super().__init__(f"invalid search condition {text!r}: {why}")
        self.text, self.why = text, why


# --- moving commits between repositories (push, fetch) -------------------------------


class NotFastForward(MintError):
    """A line head may only move to a descendant of where it is, unless forced."""

    def __init__(self, line: str, head: str, new: str):
        super().__init__(f"line {line} is at {head[:12]}, and {new[:12]} does not descend from it")
        self.line, self.head, self.new = line, head, new


class InvalidObject(MintError, ValueError):
    """A commit, base or evaluation that arrived is malformed or does not match its id."""


class MissingObjects(MintError, LookupError):
    """What an arriving commit refers to (parents, members, blobs) is not here."""

    def __init__(self, what: str, ids: list[str]):
        shown = ", ".join(i[:12] for i in ids[:5]) + (", ..." if len(ids) > 5 else "")
        super().__init__(f"missing {what}: {shown}")
        self.what, self.ids = what, ids


# --- the registry's identities ---------------------------------------------------------


class Unauthenticated(MintError, PermissionError):
    """No bearer token, or one that is unknown or revoked."""


class Forbidden(MintError, PermissionError):
    """The token's role or line globs do not allow the request."""

    def __init__(self, identity: str, why: str):
        super().__init__(f"{identity} may not {why}")
        self.identity, self.why = identity, why


class TokenExists(MintError, FileExistsError):
    """Token names are identities in history: a name is never given out twice."""

    def __init__(self, name: str):
        super().__init__(f"a token named {name} exists (or existed: names are not reused)")
        self.name = name


class UnknownToken(MintError, LookupError):
    def __init__(self, name: str):
        super().__init__(f"no token named {name}")
        self.name = name


class InvalidWebhookUrl(MintError, ValueError):
    def __init__(self, url: str, why: str):
        super().__init__(f"invalid webhook URL {url!r}: {why}")
        self.url, self.why = url, why


class UnknownWebhook(MintError, LookupError):
    def __init__(self, hook_id: object):
        super().__init__(f"no webhook with id {hook_id}")
        self.hook_id = hook_id


# --- a registry seen from a client ------------------------------------------------------


class RegistryError(MintError):
    """The registry answered with an error no other class describes."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class RegistryUnreachable(RegistryError, ConnectionError):
    pass


class LocalOnly(MintError):
    """An operation that needs the repository's own database and store, given a URL."""

    def __init__(self, operation: str):
        super().__init__(f"{operation} runs only where the repository is, not against a registry")
        self.operation = operation


class PushRejected(RegistryError):
    """The registry kept its line head: another push moved it, or ours does not descend."""

    def __init__(self, line: str, ours: str, theirs: str | None, why: str):
        got = theirs[:12] if theirs else "nothing"
        super().__init__(
            f"push of {line} ({ours[:12]}) refused: the registry's {line} is at {got}; {why}", 409
        )
        self.line, self.ours, self.theirs, self.why = line, ours, theirs, why


# --- signing (signing.py), evidence from harnesses and merges (evidence.py), what serves
# --- (fleet.py), contracts per team and proposals (teams.py), traces and feedback (traces.py):
# --- imported after the classes their errors derive from
from mint.errors.evidence import (  # noqa: E402, F401 (re-exported)
    InvalidResults,
    MergeMismatch,
    OtherModel,
)
from mint.errors.fleet import (  # noqa: E402, F401 (re-exported)
    InvalidReport,
    NotConverged,
    TooManyInstances,
    UnknownServedCommit,
)
from mint.errors.signing import (  # noqa: E402, F401 (re-exported)
    InvalidKey,
    InvalidSignature,
    KeyExists,
    MoveNotSigned,
    MoveStatementMismatch,
    NotVerified,
    SigningUnavailable,
    UnsignedMembers,
)
from mint.errors.teams import (  # noqa: E402, F401 (re-exported)
    ContractAmbiguous,
    ContractConflict,
    NothingToPropose,
    ProposalClosed,
    ProposalStale,
)
from mint.errors.traces import (  # noqa: E402, F401 (re-exported)
    DatasetNotFound,
    InvalidFeedback,
    InvalidTraces,
    TraceNotFound,
)
