"""Proposals: commits offered to a line, merged or closed by its writers (issue 37).

Defined plain; `mint.objects` makes each a frozen dataclass on first use."""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING

from mint.ids import CommitId
from mint.objects._lazy import frozen

if TYPE_CHECKING:
    from mint.objects._commits import Diff
    from mint.objects._gates import Evaluation, GateReport


@frozen
class Proposal:
    """A commit offered to LINE (`refs/pr/NUMBER` on the Hub), which no head holds until a
    writer of the line merges it."""

    line: str
    number: int
    commit_id: CommitId
    base: str | None  # the line's head it was proposed on
    title: str
    description: str
    status: str  # open | merged | closed
    by: str  # who proposed it (the commit's author)
    created_at: str
    closed_by: str | None = None  # who merged or closed it
    closed_at: str | None = None

    @property
    def ref(self) -> str:
        """Its revision on the Hub."""
        return f"refs/pr/{self.number}"


@frozen
class ProposalDetail:
    """A proposal as its page shows it: what it changes against the line's head, its
    evaluations, and the gate of each channel of the line a contract guards, for its commit:
    what the gate would say once the merge makes it the head."""

    proposal: Proposal
    head: str | None  # the line's head now
    diff: Diff | None  # from the head to the proposal's commit (None: the line has no head)
    evaluations: list[Evaluation] = field(default_factory=list)
    gates: list[GateReport] = field(default_factory=list)
