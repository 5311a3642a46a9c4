"""Errors the runtime raises on purpose. All are `mint.errors.MintError`s.

A base whose fingerprint differs from the set's raises `mint.errors.BaseFolderMismatch`; a
file whose bytes changed raises whatever the `verify` callable raises (the store's
`BlobCorrupt`). The classes here cover what only the runtime can find out.
"""

from __future__ import annotations

from mint.errors import MintError


class AdapterLoadError(MintError, ValueError):
    """A member adapter cannot be loaded fully onto the base: nothing was changed."""

    def __init__(self, commit_id: str, why: str):
        super().__init__(f"adapter {commit_id[:12]} cannot be loaded: {why}")
        self.commit_id, self.why = commit_id, why


class AmbiguousLabels(MintError, ValueError):
    """Two routing labels tokenize to the same tokens, so no router can tell them apart."""

    def __init__(self, first: str, second: str):
        super().__init__(f"routing labels {first!r} and {second!r} tokenize to the same tokens")
        self.first, self.second = first, second


class UnknownModel(MintError, LookupError):
    """A request named a model that is neither the served set nor one of its experts."""

    def __init__(self, model: str, set_name: str):
        super().__init__(
            f"model {model!r} does not exist; this server serves {set_name!r} and its experts"
        )
        self.model, self.set_name = model, set_name


class NothingStaged(MintError, RuntimeError):
    """`swap()` was called with no version staged."""


class NotServing(MintError, RuntimeError):
    """The runtime has no active version yet."""


class EmptyConversation(MintError, ValueError):
    """A turn was asked for with no user message to answer."""


class TurnCancelled(MintError, RuntimeError):
    """The caller of a turn cancelled it before it finished (a client went away)."""


class EngineUnavailable(MintError, ConnectionError):
    """The vLLM server that runs the forward passes cannot be reached or refused a request."""
