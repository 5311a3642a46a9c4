"""How far a long transfer has got: the bytes moved of a total, reported as they move.

The loops that move bytes (push, fetch and clone, a pull from the Hub, checkout and export)
call one `Progress` with byte counts. The plain `Progress` only counts, so the library prints
nothing of its own; an API caller may pass one with an `on_bytes` callback, or a subclass. The
CLI picks what a person sees (`mint.cli._common.transfer_progress`): a `Bar` on a terminal's
stderr, nothing otherwise; what was moved, and how fast (`moved`), ends the one summary line
each command prints on stdout.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import TextIO

# What each operation moves, for its summary line: blobs or files
COUNTS = {
    "push": "blob",
    "fetch": "blob",
    "clone": "blob",
    "pull": "file",
    "checkout": "file",
    "export": "file",
}
_TRUE = {"1", "ON", "YES", "TRUE"}


def env_flag(value: str | None) -> bool:
    """Whether an environment variable's VALUE says yes (1, on, yes, true)."""
    return (value or "").strip().upper() in _TRUE


class Progress:
    """Counts what one operation moves, across its phases; shows nothing.

    Args:
        on_bytes: called with (bytes moved, total bytes known) after each chunk.
    """

    draws = False  # whether it draws bars on a terminal (a library may then draw its own)
    # the counts start here, so that a subclass need not call __init__
    on_bytes: Callable[[int, int], object] | None = None
    items = 0  # blobs or files
    bytes = 0  # moved so far
    total = 0  # to move, as far as the phases begun so far know
    seconds = 0.0  # spent in phases
    _since: float | None = None

    def __init__(self, on_bytes: Callable[[int, int], object] | None = None):
        self.on_bytes = on_bytes

    def start(self, total_bytes: int, items: int) -> None:
        """A phase begins: TOTAL_BYTES more, in ITEMS blobs or files, to move."""
        self.total += total_bytes
        self.items += items
        if self._since is None:
            self._since = time.monotonic()

    def advance(self, nbytes: int) -> None:
        """NBYTES more moved."""
        self.bytes += nbytes
        if self.on_bytes is not None:
            self.on_bytes(self.bytes, self.total)

    def blob_done(self, blob_id: str) -> None:
        """Blob BLOB_ID is whole (a hook for subclasses)."""

    def finish(self) -> None:
        """The phase ended, all moved or stopped."""
        if self._since is not None:
            self.seconds += time.monotonic() - self._since
            self._since = None

    @contextlib.contextmanager
    def phase(self, total_bytes: int, items: int) -> Iterator[Progress]:
        """`start`, then `finish` however the block ends."""
        self.start(total_bytes, items)
        try:
            yield self
        finally:
            self.finish()

    def moved(self, nbytes: int, items: int, seconds: float) -> None:
        """Count what another library moved and showed on its own (huggingface_hub's bars)."""
        self.items += items
        self.total += nbytes
        self.seconds += seconds
        self.advance(nbytes)

    def close(self) -> None:
        """No more bytes will move: a bar ends here, so that what follows prints below it."""
        self.finish()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()


def moved(progress: Progress, op: str) -> str:
    """What PROGRESS counted for the operation OP (a key of COUNTS), as the end of the
    command's one summary line: "3 blobs, 80.1 MB in 1.2 s (66.8 MB/s)"."""
    noun = COUNTS[op]
    text = f"{progress.items} {noun}{'' if progress.items == 1 else 's'}, {size(progress.bytes)}"
    text += f" in {progress.seconds:.1f} s"
    if progress.bytes and progress.seconds > 0:
        text += f" ({size(progress.bytes / progress.seconds)}/s)"
    return text


class Bar(Progress):
    """A tqdm bar on STREAM, a terminal: bytes, rate and time left. One bar for the whole
    operation OP: each phase adds its bytes to the bar's total (a fetch learns them line by
    line). Nothing is drawn while there is nothing to move."""

    draws = True

    def __init__(self, op: str, stream: TextIO):
        super().__init__()
        self.op, self.stream, self._bar = op, stream, None

    def start(self, total_bytes: int, items: int) -> None:
        super().start(total_bytes, items)
        if self._bar is not None:
            self._bar.total = self.total
            self._bar.refresh()
        elif self.total:
            from tqdm import tqdm

            self._bar = tqdm(
                desc=self.op,
                total=self.total,
                initial=self.bytes,
                unit="B",
                unit_scale=True,
                file=self.stream,
                dynamic_ncols=True,
                leave=True,
            )

    def advance(self, nbytes: int) -> None:
        super().advance(nbytes)
        if self._bar is not None:
            self._bar.update(nbytes)

    def close(self) -> None:
        super().close()
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def size(nbytes: float) -> str:
    """NBYTES for a person, in powers of 1000 as tqdm shows them: "999 B", "80.1 MB"."""
    if nbytes < 999.5:
        return f"{nbytes:.0f} B"
    for unit in ("kB", "MB", "GB"):
        nbytes /= 1000
        if nbytes < 999.95:
            return f"{nbytes:.1f} {unit}"
    return f"{nbytes / 1000:.1f} TB"
