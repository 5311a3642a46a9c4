"""Canaries: a candidate set served to a fraction of a channel's requests beside its holder,
and the live feedback that compares the two.

A canary is a row of `canaries`; at most one is open (not stopped) per line and channel.
Its start and its stop are also rows of `ref_history` (kind `canary`, name the channel,
old the baseline, new the candidate), so `history LINE@CHANNEL` shows them beside the
channel's moves and a registry's event stream announces them (`canary.started`,
`canary.stopped`) to the servers that follow the channel.

A canary is a deployment: a share of real traffic reaches its candidate. So starting one
takes the gate a promote to the channel takes (its contracts, approvals by identities other
than the author and the pusher on a protected channel, `requires`), or `force` with a
reason; the start's history row keeps the gate's contract and evaluations, as a move's
does. No ref moves: rollback's `back` chain and the gate's "held" checks read channel rows
only, and never see these.

Live numbers: a variant's score is the mean of its traces' feedback scores (the latest
feedback of each trace), with a 95% Wilson score interval. Scores lie in [0, 1], and a
variable in [0, 1] with mean p has variance at most p(1 - p): Wilson's interval, built on
that Bernoulli variance, is therefore conservative for graded scores, and unlike the plain
normal interval it stays inside [0, 1] and is sensible for a handful of scores.
"""

from __future__ import annotations

import datetime as dt
import math

import sqlalchemy as sa

from mint import schema as s
from mint.commits import rows
from mint.errors import (
    CanaryOpen,
    ForceNeedsReason,
    GateRefused,
    InvalidConfig,
    NoCanary,
    RevisionNotFound,
)
from mint.gates.checks import gate_report
from mint.gates.contracts import get_row
from mint.ids import Action, CanaryOutcome, CommitId, Kind, RefKind, as_utc, iso, utcnow
from mint.objects import Canary, CanaryStatus, GateReport, VariantStats
from mint.refs import RefsContainer, check_text, resolve
from mint.refs.revisions import check_local_ref
from mint.repo import Repo

Z95 = 1.959963984540054  # the standard normal's 97.5th percentile
CANARY_VARIANT = "canary"
PRODUCTION_VARIANT = "production"


def split_ref(ref: str) -> tuple[str, str]:
    """LINE@CHANNEL as (line, channel)."""
    line, _, channel = ref.partition("@")
    if not line or not channel or any(c in channel for c in "~^"):
        raise RevisionNotFound(ref, "expected LINE@CHANNEL")
    check_local_ref("channel", channel)
    return line, channel


def canary_of(repo: Repo, rev: str) -> Canary | None:
    """The open canary of REV (LINE@CHANNEL), or None: none is open, or REV names no channel
    (a commit id, a tag, a line head)."""
    line, _, channel = rev.partition("@")
    if not line or not channel:
        return None
    with repo.db.read() as conn:
        row = open_row(conn, line, channel)
    return as_canary(row) if row is not None else None


def open_row(conn, line: str, channel: str):
    c = s.canaries.c
    q = sa.select(s.canaries).where(c.line == line, c.channel == channel, c.stopped_at.is_(None))
    return conn.execute(q.order_by(c.id.desc()).limit(1)).first()


def latest_row(conn, line: str, channel: str):
    c = s.canaries.c
    q = sa.select(s.canaries).where(c.line == line, c.channel == channel)
    return conn.execute(q.order_by(c.id.desc()).limit(1)).first()


def as_canary(r) -> Canary:
    return Canary(
        r.id,
        r.line,
        r.channel,
        CommitId(r.candidate),
        CommitId(r.baseline),
        r.fraction,
        iso(r.started_at),
        r.started_by,
        iso(r.stopped_at),
        r.stopped_by,
        CanaryOutcome(r.outcome) if r.outcome else None,
        r.reason,
    )


def check_fraction(fraction: float) -> float:
    ok = isinstance(fraction, (int, float)) and not isinstance(fraction, bool)
    if not ok or not math.isfinite(fraction) or not 0 < fraction < 1:
        raise InvalidConfig(f"a canary's fraction lies strictly between 0 and 1, not {fraction}")
    return float(fraction)


def _locked_holder(conn, line: str, channel: str, ref: str) -> str:
    """The channel's holder, its row locked until the transaction ends (PostgreSQL): two
    starts on one channel take turns, so the second sees the first's open canary. SQLite's
    write transactions are serialised already."""
    r = s.refs.c
    q = sa.select(r.target, r.kind).where(r.line == line, r.name == channel).with_for_update()
    row = conn.execute(q).first()
    if row is None or row.kind != RefKind.CHANNEL:
        raise RevisionNotFound(ref, "a canary needs a channel with a holder")
    return row.target


def canary_start(
    repo: Repo,
    ref: str,
    candidate: str,
    fraction: float,
    *,
    by: str,
    reason: str | None = None,
    contract: str | None = None,
    force: bool = False,
) -> Canary:
    """Serve CANDIDATE (a commit of the set line) to FRACTION of LINE@CHANNEL's requests,
    beside the channel's holder. Refused while another canary is open there, and unless
    the candidate passes the gate a promote to CHANNEL would run (its contracts, plus
    CONTRACT if named; approvals by others than its author and pusher on a protected
    channel): real traffic reaches it, so a canary is a deployment. FORCE overrides a
    refusing gate and needs a REASON, which history records with the gate's evidence."""
    line, channel = split_ref(ref)
    fraction = check_fraction(fraction)
    if force and not (reason and reason.strip()):
        raise ForceNeedsReason(channel)
    check_text("reason", reason)
    with repo.db.write() as conn:
        baseline = _locked_holder(conn, line, channel, ref)
        cid = resolve(conn, candidate).id
        row = rows.commit_row(conn, cid)
        if row.line != line or row.kind != Kind.SET:
            raise RevisionNotFound(candidate, f"not a set commit of line {line}")
        if cid == baseline:
            raise InvalidConfig(f"{cid[:12]} already holds {ref}; a canary needs another set")
        found = open_row(conn, line, channel)
        if found is not None:
            raise CanaryOpen(ref, found.id, found.candidate)
        report = gate_report(conn, cid, line, channel, contract)
        if not report.ok and not force:
            raise GateRefused(report)
        values = dict(line=line, channel=channel, candidate=cid, baseline=baseline)
        values |= dict(fraction=fraction, started_at=utcnow(), started_by=by, reason=reason)
        new_id = conn.execute(s.canaries.insert().values(**values)).inserted_primary_key[0]
        logged = reason if report.ok else f"{FORCED}: {reason}"
        entry = RefsContainer(conn).log_event(
            line, channel, RefKind.CANARY, Action.CANARY_START, baseline, cid, by=by, reason=logged
        )
        _evidence(conn, entry, report)
        return as_canary(_row(conn, new_id))


FORCED = "forced past a refusing gate"


def _evidence(conn, entry: int, report: GateReport) -> None:
    """Beside the start, what it rests on, as a promote's row keeps it: the (first) contract
    version the gate applied and the evaluations it read."""
    contract = None
    if report.contracts:
        name, _, version = report.contracts[0].partition("@v")
        contract = get_row(conn, name, int(version), report.line).id
    h = s.ref_history.c
    update = s.ref_history.update().where(h.id == entry)
    conn.execute(update.values(contract=contract, evaluations=report.evaluations))


def canary_stop(
    repo: Repo,
    ref: str,
    *,
    by: str,
    reason: str | None = None,
    outcome: str = CanaryOutcome.STOPPED,
) -> Canary:
    """Stop LINE@CHANNEL's open canary; OUTCOME says whether its candidate was promoted."""
    line, channel = split_ref(ref)
    check_text("reason", reason)
    try:
        outcome = CanaryOutcome(outcome)
    except ValueError:
        known = ", ".join(o.value for o in CanaryOutcome)
        raise InvalidConfig(f"a canary ends {known}, not {outcome!r}") from None
    with repo.db.write() as conn:
        found = open_row(conn, line, channel)
        if found is None:
            raise NoCanary(ref)
        c = s.canaries.c
        values = dict(stopped_at=utcnow(), stopped_by=by, outcome=outcome)
        if reason is not None:
            values["reason"] = reason
        done = conn.execute(
            s.canaries.update().where(c.id == found.id, c.stopped_at.is_(None)).values(**values)
        ).rowcount
        if done != 1:
            raise NoCanary(ref)
        RefsContainer(conn).log_event(
            line,
            channel,
            RefKind.CANARY,
            Action.CANARY_STOP,
            found.baseline,
            found.candidate,
            by=by,
            reason=f"{outcome}: {reason}" if reason else str(outcome),
        )
        return as_canary(_row(conn, found.id))


def _row(conn, canary_id: int):
    return conn.execute(sa.select(s.canaries).where(s.canaries.c.id == canary_id)).one()


def canary_status(repo: Repo, ref: str) -> CanaryStatus:
    """LINE@CHANNEL's open canary (else its latest) with live feedback on both variants
    since it started (until it stopped)."""
    line, channel = split_ref(ref)
    with repo.db.read() as conn:
        row = open_row(conn, line, channel) or latest_row(conn, line, channel)
        if row is None:
            raise NoCanary(ref, "no canary has run")
        since, until = row.started_at, row.stopped_at
        production = variant_stats(
            conn, line, row.baseline, production_variants(channel), since, until
        )
        candidate = variant_stats(conn, line, row.candidate, [CANARY_VARIANT], since, until)
    return CanaryStatus(as_canary(row), production, candidate)


def production_variants(channel: str) -> list[str]:
    """The names a trace of the channel's holder carries (the channel's, or 'production')."""
    return sorted({channel, PRODUCTION_VARIANT})


# --- live statistics ---------------------------------------------------------------


def variant_stats(
    conn,
    line: str,
    commit: str,
    variants: list[str],
    since: dt.datetime | None,
    until: dt.datetime | None = None,
) -> VariantStats:
    """Traces of COMMIT on LINE served as one of VARIANTS in [SINCE, UNTIL], and the scores
    their latest feedback gave."""
    t, f = s.traces.c, s.feedback.c
    where = [t.set_line == line, t.set_commit == commit, t.variant.in_(variants)]
    if since is not None:
        where.append(t.at >= as_utc(since))
    if until is not None:
        where.append(t.at <= as_utc(until))
    served = conn.execute(sa.select(sa.func.count()).where(*where)).scalar() or 0
    latest = sa.select(sa.func.max(f.id)).group_by(f.trace_id).scalar_subquery()
    q = (
        sa.select(sa.func.count(), sa.func.avg(f.score))
        .select_from(s.traces.join(s.feedback, f.trace_id == t.id))
        .where(*where, f.id.in_(latest))
    )
    scored, mean = conn.execute(q).one()
    variant = CANARY_VARIANT if variants == [CANARY_VARIANT] else PRODUCTION_VARIANT
    mean = float(mean) if scored else None
    low, high = wilson(mean, scored) if scored else (None, None)
    return VariantStats(variant, CommitId(commit), served, scored or 0, mean, low, high)


def wilson(mean: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a mean MEAN of N scores in [0, 1]."""
    p = min(max(mean, 0.0), 1.0)
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)
