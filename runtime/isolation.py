"""One turn's failure stays that turn's: how a batch goes on without the turn that broke.

Turns are gathered into batches (see `batching`), but what one client sends must never fail
another's turn. So each turn's prompts are tokenized on their own (`Failures.each`), a
decoding call that fails is retried row by row (`decoding.generate_each`), and a turn that
still fails is told at once through its `on_error` while the rest of its batch runs on.

A failure caused by the turn's own input (the tokenizer refuses its text, a token id out of
range) is an `UnusableTurn`, which the server answers with a 400; anything else keeps its
type (a 500 for that turn alone).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from mint.errors import MintError

log = logging.getLogger("mint.runtime")

# What a tokenizer or an embedding lookup raises for input it cannot take.
INPUT_ERRORS = (ValueError, TypeError, IndexError, KeyError, UnicodeError, OverflowError)


class UnusableTurn(MintError, ValueError):
    """A turn whose text cannot be tokenized or decoded; it fails alone (HTTP 400)."""

    def __init__(self, why: str):
        # what a tokenizer says may quote the text: kept short and encodable in a response
        why = why[:200].encode("utf-8", "backslashreplace").decode("utf-8")
        super().__init__(f"the conversation cannot be processed: {why}")
        self.why = why


def turn_error(exc: BaseException) -> BaseException:
    """What a turn that raised `exc` by itself fails with: an UnusableTurn when `exc` is about
    its input, `exc` itself otherwise (mint's own errors included)."""
    if isinstance(exc, MintError) or not isinstance(exc, INPUT_ERRORS):
        return exc
    return UnusableTurn(f"{type(exc).__name__}: {exc}")


class Failures:
    """The jobs of one batch that failed. Each is told as soon as it fails, through its
    `on_error(error)`; a job without one raises the error instead (a batch of one)."""

    def __init__(self, jobs: Sequence[Any]):
        self.jobs = jobs
        self.errors: dict[int, BaseException] = {}

    def __contains__(self, index: int) -> bool:
        return index in self.errors

    def fail(self, index: int, exc: BaseException) -> None:
        """Fail job `index` (once) with `turn_error(exc)`."""
        if index in self.errors:
            return
        error = turn_error(exc)
        self.errors[index] = error
        log.info("a turn failed alone in its batch: %s: %s", type(error).__name__, error)
        hook: Callable[[BaseException], None] | None = self.jobs[index].on_error
        if hook is None:
            raise error
        hook(error)

    def each(self, indices: Iterable[int], make: Callable[[int], Any]) -> dict[int, Any]:
        """`make(i)` for every job not failed yet, each on its own: one that raises fails
        only job `i`."""
        out: dict[int, Any] = {}
        for i in indices:
            if i in self.errors:
                continue
            try:
                out[i] = make(i)
            except Exception as exc:  # noqa: BLE001 - the error is the job's, not the batch's
                self.fail(i, exc)
        return out
