"""The errors of what serves (mint.fleet: reports from serving processes, `--wait`): part of
`mint.errors`, which re-exports them."""

from __future__ import annotations

from mint.errors import MintError


class InvalidReport(MintError, ValueError):
    """A serving process's report that is malformed or names what is not here."""

    def __init__(self, why: str):
        super().__init__(f"invalid report: {why}")
        self.why = why


class UnknownServedCommit(InvalidReport, LookupError):
    """A report names a commit this repository does not have on the line it follows."""

    def __init__(self, name: str, commit: str):
        super().__init__(f"{name} serves {commit[:12]}, which is no commit of its line here")
        self.name, self.commit = name, commit


class TooManyInstances(MintError):
    """One identity reports for more live instances than the registry keeps for it."""

    def __init__(self, identity: str, limit: int):
        super().__init__(
            f"{identity} reports for {limit} live instances already: no more are kept for it"
        )
        self.identity, self.limit = identity, limit


class NotConverged(MintError):
    """A `--wait` that ran out of time: LAGGING holds one line per live instance that does
    not serve the target, with its last failure."""

    def __init__(self, ref: str, target: str, seconds: float, lagging: list[str]):
        shown = "; ".join(lagging[:10]) + ("; ..." if len(lagging) > 10 else "")
        super().__init__(
            f"{len(lagging)} live instance{'s' if len(lagging) != 1 else ''} of {ref} did not "
            f"serve {target[:12]} within {seconds:g} s: {shown}"
        )
        self.ref, self.target, self.seconds, self.lagging = ref, target, seconds, lagging
