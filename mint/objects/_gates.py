"""Contracts, evaluations, gates, channel moves, approvals and canaries.

Defined plain; `mint.objects` makes each a frozen dataclass on first use."""

from __future__ import annotations

from dataclasses import field

from mint.ids import Action, CanaryOutcome, CommitId, ContractId, EvalSource, Kind
from mint.objects._lazy import frozen


@frozen
class Contract:
    id: ContractId
    name: str
    version: int
    channel: str
    requires: list[str]
    approvals: int
    metrics: list[dict]  # {"name", and any of "min", "max", "max_regression"}
    evaluator: dict | None  # {"command": [...], "timeout": seconds, "version": str?}
    lines: list[str] | None
    created_at: str
    created_by: str
    live: dict | None = None  # [live]: min_score, max_drop, min_traces, ... (those given)
    signature: dict | None = None  # [signature]: required, keys (names of trusted keys)
    served: list[dict] | None = None  # [[served]]: channel, min_minutes, min_instances
    sources: list[str] | None = None  # the evaluation sources its gate counts (None: all but
    # model-card, the model card's results as the trainer wrote them)


@frozen
class ContractAdded:
    contract: Contract
    created: bool  # False when the file equalled the latest version


@frozen
class Check:
    """One row of a gate's table."""

    check: str
    required: str
    found: str
    ok: bool


@frozen
class Evaluation:
    id: int
    commit_id: CommitId
    contract_id: ContractId
    contract: str
    version: int
    metrics: dict
    source: EvalSource | str  # str: an unknown source, stored by an older mint
    evaluator: dict | None
    data_hash: str | None
    by: str
    at: str
    checks: list[Check] = field(default_factory=list)
    pushed_by: str | None = None  # who pushed it to this registry, when it came by push


@frozen
class GateReport:
    commit_id: CommitId
    line: str
    channel: str
    holder: str | None
    contracts: list[str]  # "name@vN" of each contract that guards the channel
    checks: list[Check]
    evaluations: list[int]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


@frozen
class Move:
    """One entry of a channel's history."""

    id: int
    at: str
    action: Action
    line: str
    channel: str
    from_: str | None
    to: str | None  # None: the channel was removed (`mint channel rm`)
    by: str
    reason: str | None
    contract: str | None
    evaluations: list[int]
    # an open canary this move stopped in its transaction (its baseline no longer holds)
    stopped_canary: int | None = None
    # A forced promote's answer: the gate's checks that failed and were overridden (the channel
    # page recomputes the same rows for every forced move of its history; history rows leave
    # this empty).
    overridden: list[Check] = field(default_factory=list)


@frozen
class Approval:
    commit_id: CommitId
    channel: str
    by: str
    at: str
    created: bool


@frozen
class LineStatus:
    name: str
    kind: Kind
    head: str | None
    channels: dict[str, str]
    # REMOTE/CHANNEL -> commit: each remote's channels as the last fetch saw them (read-only)
    remote: dict[str, str] = field(default_factory=dict)
    # CHANNEL -> [live instances serving its holder, live instances following it] (issue 38),
    # for the channels some serving process reports it follows
    serving: dict[str, list[int]] = field(default_factory=dict)


@frozen
class Canary:
    """A candidate set served to a fraction of a channel's requests beside its holder."""

    id: int
    line: str
    channel: str
    candidate: CommitId
    baseline: CommitId  # the channel's holder when the canary started
    fraction: float
    started_at: str
    started_by: str
    stopped_at: str | None = None
    stopped_by: str | None = None
    outcome: CanaryOutcome | None = None
    reason: str | None = None
    overridden: list[Check] = field(default_factory=list)  # a forced start's failed checks


@frozen
class VariantStats:
    """Live feedback on one variant: traces served, those scored, the mean score weighed so
    that no caller or user is over its share (`mint.gates.live`) and its Wilson interval (low,
    high) at the policy's confidence, None while nothing is scored."""

    variant: str  # production | canary
    commit: CommitId
    traces: int
    scored: int
    mean: float | None
    low: float | None
    high: float | None
    users: int = 0  # distinct users behind the scored traces (a trace without one is its own)
    callers: int = 0  # distinct identities whose feedback counts (anonymous is one)
    effective: float | None = None  # the weighed traces' effective number (Kish)
    unmet: str | None = None  # why the shares cannot be met (too few users or callers)


@frozen
class Verdict:
    """What the live numbers say of a canary: promote, stop or wait, and why; the interval
    of the difference (candidate - production) when both variants could be judged."""

    action: str  # promote | stop | wait
    reason: str
    low: float | None = None
    high: float | None = None


@frozen
class CanaryStatus:
    """A canary (the open one, else the latest) and its two variants side by side; the
    channel's holder now (a canary whose baseline no longer holds is judged against nothing)
    and what the live numbers say under the policy applied."""

    canary: Canary
    production: VariantStats
    candidate: VariantStats
    holder: CommitId | None = None
    verdict: Verdict | None = None
