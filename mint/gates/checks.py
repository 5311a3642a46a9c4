"""The gate's table: one row per metric bound, requirement and approval count."""

from __future__ import annotations

import sqlalchemy as sa

from mint import schema as s
from mint.errors import ForceNeedsReason
from mint.exchange.received import shown
from mint.fleet.reads import served_minutes
from mint.gates import evaluations as ev
from mint.gates.contracts import get_row
from mint.gates.reads import counted_evaluated, guards_evaluated, has_held
from mint.ids import CommitId, RefKind
from mint.objects import Check, GateReport
from mint.refs import RefsContainer
from mint.signing.commits import verify_in
from mint.signing.policy import judge, required


def check_forced(force: bool, reason: str | None, channel: str) -> None:
    """Forcing CHANNEL past its gate (a promote, a canary's start) needs a REASON, which
    history records: checked here for a repository and, before anything is sent, for a
    registry's client (ForceNeedsReason)."""
    if force and not (reason and reason.strip()):
        raise ForceNeedsReason(channel)


def number_text(x: float | None) -> str:
    """A metric's number as the gate's table (and every page beside it) shows it."""
    return "-" if x is None else f"{x:.6g}"


def metric_checks(body: dict, values: object, holder: object, holder_id: str | None):
    """One row per metric bound: min, max, and max_regression against the holder. VALUES
    and HOLDER are metrics as stored: a value that is not a finite number (a row an older
    mint stored unchecked) fails its rows, and the table says what is stored."""
    values = ev.stored_metrics(values)
    holder = None if holder is None else ev.stored_metrics(holder)
    rows = []
    for m in body["metrics"]:
        name = m["name"]
        found, shown_as = _found(values, name)
        if "min" in m:
            ok = found is not None and found >= m["min"]
            rows.append(Check(name, f">= {number_text(m['min'])}", shown_as, ok))
        if "max" in m:
            ok = found is not None and found <= m["max"]
            rows.append(Check(name, f"<= {number_text(m['max'])}", shown_as, ok))
        if "max_regression" in m:
            rows.append(_regression(name, m["max_regression"], values, holder, holder_id))
    return rows


def _found(values: dict, name: str) -> tuple[float | None, str]:
    """NAME's number in VALUES (None: missing or not a number) and how the table shows it."""
    found = ev.finite_metric(values.get(name))
    if found is None and name in values:
        return None, f"not a number (stored value {shown(values[name])})"
    return found, number_text(found)


def _regression(name, allowed: float, values: dict, holder, holder_id: str | None) -> Check:
    label = f"{name} (regression)"
    found, shown_as = _found(values, name)
    if holder_id is None:
        return Check(label, "no holder to compare with", shown_as, found is not None)
    base, base_shown = _found(holder or {}, name)
    if base is None:
        need = f">= holder {holder_id[:12]} - {number_text(allowed)}"
        held = "holder not evaluated" if base_shown == "-" else f"holder's value is {base_shown}"
        return Check(label, need, held, False)
    need = base - allowed
    required = f">= {number_text(need)} (holder {number_text(base)} - {number_text(allowed)})"
    return Check(label, required, shown_as, found is not None and found >= need)


def channel_holder(conn, line: str, channel: str) -> str | None:
    ref = RefsContainer(conn).get(line, channel)
    return ref.target if ref is not None and ref.kind == RefKind.CHANNEL else None


def gate_report(conn, cid: str, line: str, channel: str, extra: str | None = None) -> GateReport:
    """Check every contract guarding LINE@CHANNEL (plus EXTRA, if named) for commit CID."""
    return gate_rows(conn, cid, line, channel, extra, channel_holder(conn, line, channel))[0]


def gate_rows(conn, cid: str, line: str, channel: str, extra, holder: str | None):
    """`gate_report` given the channel's HOLDER (already read), with the contracts rows it
    applied, in the report's order: (report, rows)."""
    guarded = guards_evaluated(conn, line, channel, cid, holder)
    rows = [g.row for g in guarded]
    if extra and extra not in {r.name for r in rows}:
        guarded.append(counted_evaluated(conn, get_row(conn, extra, line=line), cid, holder))
        rows.append(guarded[-1].row)
    checks, evals = [], []
    for row, found_id, values, prev in guarded:
        if found_id is None:
            checks.append(missing_evaluation(row))
            values = {}
        else:
            evals.append(found_id)
        checks += metric_checks(row.body, values, prev, holder)
        checks += [held_check(conn, cid, line, ch) for ch in row.body["requires"]]
        if row.body["approvals"]:
            checks.append(approvals_check(approval_count(conn, cid, channel), row))
        if (row.body.get("signature") or {}).get("required"):
            checks.append(signature_check(conn, cid, row.body["signature"]["keys"]))
        checks += [served_check(conn, cid, line, t) for t in row.body.get("served", ())]
    contracts = [f"{r.name}@v{r.version}" for r in rows]
    return GateReport(CommitId(cid), line, channel, holder, contracts, checks, evals), rows


def missing_evaluation(row) -> Check:
    """The row of a contract version (a contracts row) under which no evaluation is recorded."""
    return Check(f"evaluation under {row.name} v{row.version}", "recorded", "none", False)


def signature_check(conn, cid: str, keys: list[str]) -> Check:
    """The row of a contract's `[signature]`: CID (a set: its own signature, and each
    member's that it names) signed by a trusted key, one of KEYS if named, verified as `mint
    verify` does, in CONN."""
    verdict = judge(lambda c: verify_in(conn, c, c[:12]), cid, keys)
    return Check("signature", required(keys), verdict.why, verdict.ok)


def served_check(conn, cid: str, line: str, table: dict) -> Check:
    """The row of a contract's `[[served]]`: CID served LINE@CHANNEL as its holder for
    MIN_MINUTES, on MIN_INSTANCES instances at once, by the served history."""
    channel, minutes, n = table["channel"], table["min_minutes"], table["min_instances"]
    found = served_minutes(conn, cid, line, channel, n)
    on = "1 instance" if n == 1 else f"{n} instances at once"
    return Check(
        f"served {line}@{channel}",
        f">= {minutes:g} min on {on}",
        f"{found:.1f} min",
        found >= minutes,
    )


def approvals_check(n: int, row) -> Check:
    need = row.body["approvals"]
    return Check("approvals", f">= {need}", str(n), n >= need)


def held_check(conn, cid: str, line: str, channel: str) -> Check:
    return held_row(line, channel, has_held(conn, cid, line, channel))


def held_row(line: str, channel: str, held: bool) -> Check:
    """The row of a contract's `requires`: whether the commit has held LINE@CHANNEL."""
    return Check(f"held {line}@{channel}", "yes", "yes" if held else "no", held)


def approval_count(conn, cid: str, channel: str, until=None) -> int:
    """Distinct identities that approved CID for CHANNEL (up to the datetime UNTIL, if given);
    on a protected channel, not the commit's author nor the identity that pushed it
    (segregation of duties)."""
    a = s.approvals.c
    q = sa.select(sa.func.count(sa.distinct(a.by))).where(a.commit_id == cid, a.channel == channel)
    if until is not None:
        q = q.where(a.at <= until)
    excluded = self_approvers(conn, cid, channel)
    if excluded:
        q = q.where(a.by.not_in(excluded))
    return conn.execute(q).scalar()


def self_approvers(conn, cid: str, channel: str) -> list[str]:
    """Whose approval of CID does not count for CHANNEL: on a protected channel, the commit's
    author and its pusher; on any other channel, nobody."""
    p = s.protected_channels.c
    if conn.execute(sa.select(p.channel).where(p.channel == channel)).first() is None:
        return []
    c = s.commits.c
    row = conn.execute(sa.select(c.author, c.pushed_by).where(c.id == cid)).first()
    return sorted({x for x in (row.author, row.pushed_by) if x}) if row else []
