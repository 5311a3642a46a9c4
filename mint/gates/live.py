"""Live numbers that move production: a variant's scored traces weighed so that no one caller
or user steers them, their interval, and the loop's decisions on them.

Each scored trace counts with its latest feedback. Its **caller** is the identity that gave
that feedback (a token's name; None, one anonymous caller, on a server that takes no token);
its **user** is the request's `user` within that caller (a trace without one is a user of its
own). A variant's mean weighs its traces so that no user holds more than `max_user_share` of
the weight and no caller more than `max_caller_share`: a group over its share has its traces'
weights scaled down to exactly that share (the other groups keep theirs). A share cannot be
met by fewer groups than 1/share: such a variant is not judged (a lone caller is trusted,
which is what a server without tokens, or with one, does: it trusts every caller).

The interval is Wilson's at `confidence`, on the effective number of traces (Kish's
(sum w)^2 / sum w^2): scores lie in [0, 1], whose variance at mean p is at most p(1 - p), so
the interval is conservative for graded scores and stays in [0, 1]. A canary is promoted only
when the interval of the difference (candidate - production, Newcombe's from the two Wilson
intervals) lies above -max_drop, stopped when it lies below, and stopped undecided once both
variants have `max_traces`; production is rolled back under its floor only when its upper
bound lies under `min_score`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import NormalDist

from mint.ids import CommitId
from mint.objects import VariantStats, Verdict

DEFAULT_MIN_TRACES = 20
MAX_TRACES_FACTOR = 10  # max_traces, unless given: this many times min_traces
_ROUNDS = 100  # alternate the two caps at most this often (each pass only lowers weights)
_EPS = 1e-9


@dataclass(frozen=True)
class LivePolicy:
    """A contract's `[live]` table with its defaults: what a variant needs to be judged and
    how it is judged."""

    min_score: float | None = None  # production's floor (None: no floor)
    max_drop: float = 0.0
    min_traces: int = DEFAULT_MIN_TRACES
    max_traces: int | None = None  # None: MAX_TRACES_FACTOR * min_traces
    min_users: int = 5
    min_callers: int = 1
    max_user_share: float = 0.2
    max_caller_share: float = 0.25
    confidence: float = 0.95

    @classmethod
    def of(cls, live: dict | None, *, min_traces: int | None = None) -> LivePolicy:
        """The policy of a contract's [live] table (None: the defaults); MIN_TRACES, when
        given, overrides the table's."""
        values = {k: v for k, v in (live or {}).items() if k in cls.__dataclass_fields__}
        if min_traces is not None:
            values["min_traces"] = min_traces
        return cls(**values)

    @property
    def traces_cap(self) -> int:
        return self.max_traces or MAX_TRACES_FACTOR * self.min_traces

    @property
    def users_needed(self) -> int:
        """Distinct users a variant needs: min_users, and enough for the user cap to hold."""
        return max(self.min_users, _groups_for(self.max_user_share))

    @property
    def z(self) -> float:
        return NormalDist().inv_cdf(0.5 + self.confidence / 2)


def _groups_for(share: float) -> int:
    """The fewest groups among which none need hold more than SHARE."""
    return math.ceil(1 / share - _EPS)


# --- weighing ----------------------------------------------------------------------


@dataclass
class _Group:
    caller: str | None
    user: object
    n: int  # scored traces
    total: float  # their scores' sum
    w: float = 1.0  # each trace's weight


def stats_of(
    variant: str,
    commit: str,
    traces: int,
    groups: Iterable[tuple[str | None, object, int, float]],
    policy: LivePolicy,
) -> VariantStats:
    """A variant's VariantStats from its scored traces grouped by (caller, user): each group
    as (caller, user, scored traces, sum of their scores); TRACES is how many it served."""
    gs = [_Group(c, u, int(n), float(s)) for c, u, n, s in groups if n]
    scored = sum(g.n for g in gs)
    users = len(gs)
    callers = len({g.caller for g in gs})
    empty = VariantStats(variant, CommitId(commit), traces, 0, None, None, None)
    if not gs:
        return empty
    unmet = _weigh(gs, policy)
    weight = sum(g.n * g.w for g in gs)
    mean = sum(g.total * g.w for g in gs) / weight
    effective = weight**2 / sum(g.n * g.w * g.w for g in gs)
    low, high = wilson(mean, effective, policy.z)
    return VariantStats(
        variant,
        CommitId(commit),
        traces,
        scored,
        mean,
        low,
        high,
        users=users,
        callers=callers,
        effective=round(effective, 3),
        unmet=unmet,
    )


def groups_of(scored: Iterable[tuple[float, str | None, str | None, str]]):
    """(caller, user, n, sum) groups of scored traces given as (score, caller, user, trace
    id); a trace without a user is a group of its own."""
    sums: dict[tuple, list] = defaultdict(lambda: [0, 0.0])
    for score, caller, user, trace_id in scored:
        key = (caller, user if user is not None else ("trace", trace_id))
        sums[key][0] += 1
        sums[key][1] += score
    return [(c, u, n, s) for (c, u), (n, s) in sums.items()]


def _weigh(gs: list[_Group], policy: LivePolicy) -> str | None:
    """Scale the groups' weights until no user and no caller is over its share; returns why
    the variant cannot be judged (a share fewer groups cannot meet), else None."""
    callers = len({g.caller for g in gs})
    if len(gs) < policy.users_needed:
        return f"{len(gs)} users (needs {policy.users_needed})"
    if callers < policy.min_callers:
        return f"{callers} callers (needs {policy.min_callers})"
    cap_callers = callers > 1
    if cap_callers and callers < _groups_for(policy.max_caller_share):
        need = _groups_for(policy.max_caller_share)
        return (
            f"{callers} callers, none may weigh over {policy.max_caller_share:g} "
            f"(needs one caller alone, or {need} or more)"
        )
    for _ in range(_ROUNDS):
        changed = _cap(gs, lambda g: id(g), policy.max_user_share)
        if cap_callers:
            changed |= _cap(gs, lambda g: g.caller, policy.max_caller_share)
        if not changed:
            break
    return None


def _cap(gs: list[_Group], key, share: float) -> bool:
    """Water-fill: scale the groups of KEY whose weight is over SHARE of the whole down to a
    level L with L = SHARE * (the whole once they are at L). Returns whether anything moved."""
    totals: dict = defaultdict(float)
    for g in gs:
        totals[key(g)] += g.n * g.w
    whole = sum(totals.values())
    if max(totals.values()) <= share * whole * (1 + _EPS):
        return False
    ordered = sorted(totals.values())
    below = whole
    level = None
    for capped in range(1, len(ordered) + 1):  # the `capped` largest groups sit at the level
        below -= ordered[-capped]
        room = 1 - share * capped
        if room <= 0:
            break
        level = share * below / room
        if level >= (ordered[-capped - 1] if capped < len(ordered) else 0):
            break
    if level is None or level <= 0:
        return False
    for g in gs:
        t = totals[key(g)]
        if t > level:
            g.w *= level / t
    return True


# --- intervals and decisions --------------------------------------------------------


def wilson(mean: float, n: float, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval of a mean MEAN of N (effective) scores in [0, 1]."""
    p = min(max(mean, 0.0), 1.0)
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def difference(cand: VariantStats, prod: VariantStats) -> tuple[float, float]:
    """Newcombe's interval of cand.mean - prod.mean, from their Wilson intervals."""
    d = cand.mean - prod.mean
    low = d - math.hypot(cand.mean - cand.low, prod.high - prod.mean)
    high = d + math.hypot(cand.high - cand.mean, prod.mean - prod.low)
    return low, high


def unjudged(v: VariantStats, policy: LivePolicy) -> str | None:
    """Why variant V cannot be judged yet under POLICY, or None."""
    if v.scored < policy.min_traces:
        return f"{v.scored} scored traces (needs {policy.min_traces})"
    return v.unmet


def decide(prod: VariantStats, cand: VariantStats, policy: LivePolicy) -> Verdict:
    """Promote, stop or wait on a canary's live numbers (see the module's docstring)."""
    full = min(prod.scored, cand.scored) >= policy.traces_cap
    undecided = f"undecided at {policy.traces_cap} scored traces each"
    missing = [f"{v.variant}: {why}" for v in (cand, prod) if (why := unjudged(v, policy))]
    if missing:
        return Verdict("stop" if full else "wait", "; ".join([undecided] * full + missing))
    low, high = difference(cand, prod)
    span = f"difference {cand.mean - prod.mean:+.3f} "
    span += f"[{policy.confidence:.0%} {low:+.3f}, {high:+.3f}]"
    margin = f"-max_drop {policy.max_drop:g}"
    if low >= -policy.max_drop:
        return Verdict("promote", f"{span} clears {margin}", low, high)
    if high < -policy.max_drop:
        return Verdict("stop", f"{span} lies under {margin}", low, high)
    if full:
        return Verdict("stop", f"{undecided}: {span} straddles {margin}", low, high)
    return Verdict("wait", f"{span} straddles {margin}", low, high)


def under_floor(v: VariantStats, policy: LivePolicy) -> bool:
    """Whether production's upper bound lies under the floor (with enough to judge)."""
    if policy.min_score is None or unjudged(v, policy) is not None:
        return False
    return v.high < policy.min_score
