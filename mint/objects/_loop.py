"""Learning from deployment: traces, datasets and the loop's candidates and rounds.

Defined plain; `mint.objects` makes each a frozen dataclass on first use."""

from __future__ import annotations

from dataclasses import field

from mint.ids import CommitId
from mint.objects._lazy import frozen


@frozen
class Trace:
    """One served turn as recorded, with the latest feedback on it (None when there is none)."""

    id: str  # the completion id the server returned
    at: str
    set_line: str
    set_commit: CommitId
    variant: str  # the channel's name (production), canary, or the revision served
    label: str | None  # the expert that answered
    probs: dict | None  # label -> router probability (None when the caller named the expert)
    expert_commit: str | None
    user: str | None
    messages: list | None  # None when content capture was off
    response: str | None
    latency: dict  # stage -> seconds
    score: float | None = None
    feedback_label: str | None = None  # the expert that should have answered, if given
    feedback_by: str | None = None  # who gave the latest feedback (None: anonymous or none)


@frozen
class Dataset:
    """An export of traces, stored as a blob whose sha256 is `id`."""

    id: str
    format: str  # chat | router
    records: int
    size: int
    filters: dict
    created_at: str
    created_by: str
    path: str | None = None  # where the export was written, when this call wrote it


@frozen
class Candidate:
    """A configuration one step from a channel's holder: the holder with the newest commit
    of one member line (or of several) swapped in. Members are keyed by label: `router`,
    `summary`, or an expert's label."""

    description: str
    holder: CommitId  # the set commit it derives from
    members: dict[str, str]  # label -> adapter commit
    changed: list[str]  # the labels whose member differs from the holder's
    lines: list[str]  # the member lines whose heads were swapped in
    existing: CommitId | None  # a set commit of the line with exactly these members, if any
    # label -> a merge to make for that member (`candidates --merge`, docs/merge.md): its
    # recipe (method, inputs, weights, density, seed) and the line it is committed on; such
    # a member keeps its holder's commit in `members` until the merge is made
    merges: dict[str, dict] = field(default_factory=dict)

    @property
    def uses(self) -> dict[str, str]:
        """What `set derive` takes to build it: label -> commit, for the changed labels."""
        return {label: self.members[label] for label in self.changed}


@frozen
class LoopStep:
    """One thing a round of the loop did or found, with the numbers it rested on."""

    # derive | merge | evaluate | refuse | promote | canary-start | canary-stop | rollback | wait
    action: str
    commit: str | None
    channel: str | None
    detail: str
    entry: int | None = None  # the history row it wrote, when it moved or logged something
    evaluation: int | None = None  # the evaluation it recorded or used


@frozen
class Round:
    """One step of the loop's state machine on a set line, and what it did."""

    line: str
    contract: str
    outcome: str  # rolled-back | promoted | stopped | waiting | canary-started | refused | idle
    steps: list[LoopStep]
