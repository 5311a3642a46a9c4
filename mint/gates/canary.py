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
feedback of each trace), weighed so that no caller or user holds more than its share, with a
Wilson interval (`mint.gates.live`, which also holds the decisions the loop takes on them).

A canary belongs to the holder it started beside: when the channel moves (a promote or a
rollback), the move stops the open canary in its own transaction (`stop_open`), and its status
names the holder now, so nothing compares a candidate with a set that no longer serves.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math

import sqlalchemy as sa

from mint import schema as s
from mint.commits import rows
from mint.errors import (
    CanaryOpen,
    GateRefused,
    InvalidConfig,
    NoCanary,
    RevisionNotFound,
)
from mint.gates.checks import check_forced, gate_report
from mint.gates.contracts import contract_show, get_row
from mint.gates.history import move_of
from mint.gates.live import LivePolicy, decide, stats_of
from mint.ids import Action, CanaryOutcome, CommitId, Kind, RefKind, as_utc, iso, utcnow
from mint.objects import Canary, CanaryStatus, GateReport, VariantStats, Verdict
from mint.refs import RefsContainer, check_text, resolve
from mint.refs.revisions import check_local_ref
from mint.repo import Repo
from mint.signing.moves import settle, signing_of

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
    sign: str | None = None,
    password: str | None = None,
    signature: str | None = None,
) -> Canary:
    """Serve CANDIDATE (a commit of the set line) to FRACTION of LINE@CHANNEL's requests,
    beside the channel's holder. Refused while another canary is open there, and unless
    the candidate passes the gate a promote to CHANNEL would run (its contracts, plus
    CONTRACT if named; approvals by others than its author and pusher on a protected
    channel): real traffic reaches it, so a canary is a deployment. FORCE overrides a
    refusing gate and needs a REASON, which history records with the gate's evidence. On a
    channel protected as signed it needs a signed statement of the start, as a promote does:
    made with the key in file SIGN (PASSWORD), or SIGNATURE, a bundle made elsewhere."""
    line, channel = split_ref(ref)
    fraction = check_fraction(fraction)
    signing = signing_of(sign, password, signature)
    check_forced(force, reason, channel)
    check_text("reason", reason)
    with repo.db.write() as conn:
        baseline = _locked_holder(conn, line, channel, ref)
        cid = _candidate(conn, candidate, line, baseline, ref)
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
        signed_rule(conn, entry, fraction, signing)
        started = as_canary(_row(conn, new_id))
    return dataclasses.replace(started, overridden=[c for c in report.checks if not c.ok])


FORCED = "forced past a refusing gate"


def _candidate(conn, candidate: str, line: str, baseline: str, ref: str) -> str:
    """The set commit CANDIDATE names: of LINE, and not REF's holder BASELINE."""
    cid = resolve(conn, candidate).id
    row = rows.commit_row(conn, cid)
    if row.line != line or row.kind != Kind.SET:
        raise RevisionNotFound(candidate, f"not a set commit of line {line}")
    if cid == baseline:
        raise InvalidConfig(f"{cid[:12]} already holds {ref}; a canary needs another set")
    return cid


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


def signed_rule(conn, entry: int, fraction: float, signing) -> None:
    """The channel's signature rule at a canary's door (issue 35): a canary's start or stop
    changes what the channel serves, so on a channel protected as signed it needs a signed
    statement of exactly that (its action, fraction, candidate and baseline), checked and kept
    beside its history ENTRY as a promote's is (`mint.signing.moves.settle`)."""
    settle(conn, move_of(conn, entry), signing, fraction=fraction)


def canary_stop(
    repo: Repo,
    ref: str,
    *,
    by: str,
    reason: str | None = None,
    outcome: str = CanaryOutcome.STOPPED,
    sign: str | None = None,
    password: str | None = None,
    signature: str | None = None,
) -> Canary:
    """Stop LINE@CHANNEL's open canary; OUTCOME says whether its candidate was promoted. On a
    channel protected as signed, signed as `canary_start` is."""
    line, channel = split_ref(ref)
    signing = signing_of(sign, password, signature)
    check_text("reason", reason)
    try:
        outcome = CanaryOutcome(outcome)
    except ValueError:
        known = ", ".join(o.value for o in CanaryOutcome)
        raise InvalidConfig(f"a canary ends {known}, not {outcome!r}") from None
    with repo.db.write() as conn:
        stopped = stop_open(
            conn, line, channel, by=by, outcome=outcome, reason=reason, signing=signing
        )
        if stopped is None:
            raise NoCanary(ref)
        return stopped


IMPLIED = object()  # a canary stopped by a promote or rollback: the move's signature covers it


def stop_open(
    conn,
    line: str,
    channel: str,
    *,
    by: str,
    outcome: CanaryOutcome,
    reason: str | None,
    signing=IMPLIED,
) -> Canary | None:
    """Stop LINE@CHANNEL's open canary in the caller's transaction (None: none was open),
    with its `canary-stop` history row; a promote or a rollback calls it as it moves (its own
    signature rule covers the stop), `canary_stop` with its SIGNING (the channel's rule)."""
    found = open_row(conn, line, channel)
    if found is None:
        return None
    c = s.canaries.c
    values = dict(stopped_at=utcnow(), stopped_by=by, outcome=outcome)
    if reason is not None:
        values["reason"] = reason
    done = conn.execute(
        s.canaries.update().where(c.id == found.id, c.stopped_at.is_(None)).values(**values)
    ).rowcount
    if done != 1:
        return None
    entry = RefsContainer(conn).log_event(
        line,
        channel,
        RefKind.CANARY,
        Action.CANARY_STOP,
        found.baseline,
        found.candidate,
        by=by,
        reason=f"{outcome}: {reason}" if reason else str(outcome),
    )
    if signing is not IMPLIED:
        signed_rule(conn, entry, found.fraction, signing)
    return as_canary(_row(conn, found.id))


def _row(conn, canary_id: int):
    return conn.execute(sa.select(s.canaries).where(s.canaries.c.id == canary_id)).one()


def canary_status(repo: Repo, ref: str, contract: str | None = None) -> CanaryStatus:
    """LINE@CHANNEL's open canary (else its latest) with live feedback on both variants
    since it started (until it stopped), weighed and judged under CONTRACT's [live] table
    (else the defaults of `mint.gates.live`), and the channel's holder now."""
    line, channel = split_ref(ref)
    policy = LivePolicy.of(contract_show(repo, contract).live if contract else None)
    with repo.db.read() as conn:
        row = open_row(conn, line, channel) or latest_row(conn, line, channel)
        if row is None:
            raise NoCanary(ref, "no canary has run")
        since, until = row.started_at, row.stopped_at
        variants = production_variants(channel)
        production = variant_stats(conn, line, row.baseline, variants, since, until, policy)
        candidate = variant_stats(
            conn, line, row.candidate, [CANARY_VARIANT], since, until, policy
        )
        holder = conn.execute(
            sa.select(s.refs.c.target).where(
                s.refs.c.line == line, s.refs.c.name == channel, s.refs.c.kind == RefKind.CHANNEL
            )
        ).scalar()
    canary = as_canary(row)
    verdict = judge(canary, holder, production, candidate, policy)
    holder = CommitId(holder) if holder else None
    return CanaryStatus(canary, production, candidate, holder, verdict)


def judge(canary: Canary, holder, production, candidate, policy: LivePolicy):
    """The verdict on an open canary: none on a stopped one; stop when its baseline no longer
    holds the channel (its numbers compare with a set that no longer serves); else the live
    numbers' (`mint.gates.live.decide`)."""
    if canary.stopped_at is not None:
        return None
    if holder != canary.baseline:
        now = holder[:12] if holder else "nothing"
        why = f"its baseline {canary.baseline[:12]} no longer holds {canary.channel} ({now} does)"
        return Verdict("stop", why)
    return decide(production, candidate, policy)


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
    policy: LivePolicy | None = None,
) -> VariantStats:
    """Traces of COMMIT on LINE served as one of VARIANTS in [SINCE, UNTIL], and the scores
    their latest feedback gave, weighed by caller and user under POLICY."""
    t, f = s.traces.c, s.feedback.c
    where = [t.set_line == line, t.set_commit == commit, t.variant.in_(variants)]
    if since is not None:
        where.append(t.at >= as_utc(since))
    if until is not None:
        where.append(t.at <= as_utc(until))
    served = conn.execute(sa.select(sa.func.count()).where(*where)).scalar() or 0
    latest = sa.select(sa.func.max(f.id)).group_by(f.trace_id).scalar_subquery()
    alone = sa.case((t.user.is_(None), t.id), else_=None)  # a trace without a user: its own
    q = (
        sa.select(f.by, t.user, alone, sa.func.count(), sa.func.sum(f.score))
        .select_from(s.traces.join(s.feedback, f.trace_id == t.id))
        .where(*where, f.id.in_(latest))
        .group_by(f.by, t.user, alone)
    )
    groups = [(by, (user, lone), n, total) for by, user, lone, n, total in conn.execute(q)]
    variant = CANARY_VARIANT if variants == [CANARY_VARIANT] else PRODUCTION_VARIANT
    return stats_of(variant, commit, served, groups, policy or LivePolicy())
