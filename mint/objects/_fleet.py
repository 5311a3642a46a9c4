"""What serves: instances as they report, a followed name's fleet, the served history, and a
`--wait`'s outcome.

Defined plain; `mint.objects` makes each a frozen dataclass on first use."""

from __future__ import annotations

from dataclasses import field

from mint.ids import CommitId
from mint.objects._lazy import frozen

LIVE, STALE, STOPPED = "live", "stale", "stopped"  # an instance's state


@frozen
class FleetFailure:
    """An instance's last failure to stage a version, with the one-line reason."""

    commit: CommitId | None  # what it tried to stage
    at: str
    kind: str  # the error's class: NotVerified, BaseMismatch, RegistryUnreachable, ...
    reason: str


@frozen
class FleetMember:
    """One instance following one name, as it last reported."""

    instance: str
    engine: str  # embedded | vllm | vllm-plugin
    base: str | None  # the fingerprint of the base it serves
    name: str  # LINE@REV, as the instance follows it
    commit: CommitId | None  # what it serves now (None: nothing)
    since: str | None
    canary: CommitId | None  # a canary's candidate it serves beside, with its share
    fraction: float | None
    canary_since: str | None
    failure: FleetFailure | None
    seen_at: str  # when the registry last heard from it
    state: str  # live (seen within three report intervals), stale, or stopped
    holder: bool  # it serves what the name names now
    off_since: str | None = None  # since when it does not (None: it does)

    @property
    def live(self) -> bool:
        return self.state == LIVE


@frozen
class ChannelFleet:
    """Every instance following one name (a channel, usually) and what the name names now."""

    name: str  # LINE@REV
    line: str
    ref: str  # the channel (or tag; '' for the line's head)
    holder: CommitId | None  # what NAME names now
    moved_at: str | None  # when the channel last moved
    canary: CommitId | None  # the open canary's candidate on the channel
    fraction: float | None
    members: list[FleetMember] = field(default_factory=list)

    @property
    def live(self) -> int:
        """Live instances following the name."""
        return sum(m.state == LIVE for m in self.members)

    @property
    def serving(self) -> int:
        """Live instances serving the holder."""
        return sum(m.state == LIVE and m.holder for m in self.members)


@frozen
class ServedInterval:
    """One stretch of the served history: INSTANCE served COMMIT for NAME from START until
    UNTIL (None: it still does, as of its last report at LAST_SEEN)."""

    id: int
    instance: str
    name: str
    commit: CommitId
    canary: bool  # served as a canary's candidate (to FRACTION of requests), not as the holder
    fraction: float | None
    start: str
    until: str | None
    last_seen: str | None = None  # an open stretch: when the instance last reported
    stale: bool = False  # an open stretch of an instance unseen since LAST_SEEN


@frozen
class Convergence:
    """A `--wait`'s outcome: every live instance following REF serves TARGET (as its holder,
    or as the canary's candidate)."""

    ref: str
    target: CommitId
    canary: bool
    seconds: float  # from the start of the wait until the fleet was seen converged
    instances: list[str]  # the live instances that serve it
    excluded: list[str] = field(default_factory=list)  # stale or stopped instances, left out
