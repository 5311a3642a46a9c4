"""Promotion gates, channels, rollback and the audit trail.

A channel (`chat@production`) moves only through promote or rollback. Every move is appended
to ref_history with who, when, from, to, the contract version and the evaluations it relied
on. The current holder's history entry links `back` to the entry it replaced, so a rollback
is one lookup however long the history is.
"""

from __future__ import annotations

import dataclasses

import sqlalchemy as sa

from mint import commits as cm
from mint import contracts as ct
from mint import refs
from mint import schema as s
from mint.errors import GateRefused, InvalidConfig, RefConflict, RefExists, RevisionNotFound
from mint.objects import (
    Approval,
    Check,
    CommitId,
    Evaluation,
    GateReport,
    LineStatus,
    Move,
    iso,
    utcnow,
)
from mint.repo import Repo, current_user

PROMOTE_ATTEMPTS = 20


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def metric_checks(body: dict, values: dict, holder: dict | None, holder_id: str | None) -> list[Check]:
    """One row per metric bound: min, max, and max_regression against the holder."""
    rows = []
    for m in body["metrics"]:
        found = values.get(m["name"])
        name = m["name"]
        if "min" in m:
            rows.append(Check(name, f">= {_fmt(m['min'])}", _fmt(found), found is not None and found >= m["min"]))
        if "max" in m:
            rows.append(Check(name, f"<= {_fmt(m['max'])}", _fmt(found), found is not None and found <= m["max"]))
        if "max_regression" in m:
            rows.append(_regression(name, m["max_regression"], found, holder, holder_id))
    return rows


def _regression(name: str, allowed: float, found: float | None, holder: dict | None, holder_id: str | None) -> Check:
    label = f"{name} (regression)"
    if holder_id is None:
        return Check(label, "no holder to compare with", _fmt(found), found is not None)
    base = (holder or {}).get(name)
    if base is None:
        return Check(label, f">= holder {holder_id[:12]} - {_fmt(allowed)}", "holder not evaluated", False)
    need = base - allowed
    return Check(label, f">= {_fmt(need)} (holder {_fmt(base)} - {_fmt(allowed)})", _fmt(found), found is not None and found >= need)


def _gate(conn, cid: str, line: str, channel: str, extra: str | None = None) -> GateReport:
    """Check every contract guarding LINE@CHANNEL (plus EXTRA, if named) for commit CID."""
    holder_row = refs.get_ref(conn, line, channel)
    holder = holder_row.target if holder_row is not None and holder_row.kind == "channel" else None
    rows = ct.guards(conn, line, channel)
    if extra and extra not in {r.name for r in rows}:
        rows.append(ct.get_row(conn, extra))
    checks, evals = [], []
    for row in rows:
        ev = ct.latest_evaluation(conn, cid, row.id)
        if ev is None:
            checks.append(Check(f"evaluation under {row.name} v{row.version}", "recorded", "none", False))
        else:
            evals.append(ev.id)
        prev = ct.latest_evaluation_any_version(conn, holder, row.name) if holder else None
        checks += metric_checks(row.body, ev.metrics if ev else {}, prev.metrics if prev else None, holder)
        checks += _requires(conn, cid, line, row.body["requires"])
        if row.body["approvals"]:
            n = _approval_count(conn, cid, channel)
            checks.append(Check("approvals", f">= {row.body['approvals']}", str(n), n >= row.body["approvals"]))
    contracts = [f"{r.name}@v{r.version}" for r in rows]
    return GateReport(CommitId(cid), line, channel, holder, contracts, checks, evals)


def _requires(conn, cid: str, line: str, channels: list[str]) -> list[Check]:
    out = []
    for ch in channels:
        held = _has_held(conn, cid, line, ch)
        out.append(Check(f"held {line}@{ch}", "yes", "yes" if held else "no", held))
    return out


def _has_held(conn, cid: str, line: str, channel: str) -> bool:
    q = sa.select(s.ref_history.c.id).where(
        s.ref_history.c.line == line, s.ref_history.c.name == channel,
        s.ref_history.c.new == cid, s.ref_history.c.kind == "channel",
    )  # fmt: skip
    return conn.execute(q.limit(1)).first() is not None


def _approval_count(conn, cid: str, channel: str) -> int:
    q = sa.select(sa.func.count()).where(s.approvals.c.commit_id == cid, s.approvals.c.channel == channel)
    return conn.execute(q).scalar()


def _target(conn, rev: str, channel: str) -> tuple[str, str]:
    refs.check_name("channel", channel)
    cid = refs.resolve(conn, rev).id
    line = cm.commit_row(conn, cid).line
    existing = refs.get_ref(conn, line, channel)
    if existing is not None and existing.kind != "channel":
        raise RefExists(f"{line}@{channel} is a tag; a channel may not share its name")
    return cid, line


def gate(repo: Repo, rev: str, channel: str, contract: str | None = None) -> GateReport:
    """A dry run of promote: the table, and whether the gate would let REV in."""
    with repo.db.read() as conn:
        cid, line = _target(conn, rev, channel)
        return _gate(conn, cid, line, channel, contract)


def evaluation_checks(repo: Repo, ev: Evaluation) -> Evaluation:
    """Attach the per-metric table for the contract's channel on the commit's line."""
    with repo.db.read() as conn:
        row = ct.get_row(conn, ev.contract, ev.version)
        line = cm.commit_row(conn, ev.commit_id).line
        holder_row = refs.get_ref(conn, line, row.channel)
        holder = holder_row.target if holder_row is not None and holder_row.kind == "channel" else None
        prev = ct.latest_evaluation_any_version(conn, holder, row.name) if holder else None
        checks = metric_checks(row.body, ev.metrics, prev.metrics if prev else None, holder)
    return dataclasses.replace(ev, checks=checks)


# --- moves ---------------------------------------------------------------------


def promote(
    repo: Repo, rev: str, channel: str, *, contract: str | None = None, force: bool = False,
    reason: str | None = None,
) -> Move:  # fmt: skip
    """Move LINE@CHANNEL to REV if the gate passes (or with force and a reason)."""
    if force and not (reason and reason.strip()):
        raise InvalidConfig("--force needs --reason: an override is recorded with why")
    for _ in range(PROMOTE_ATTEMPTS):
        try:
            return _promote_once(repo, rev, channel, contract, force, reason)
        except RefConflict:
            continue  # someone moved the channel: check the gate again against the new holder
    raise RefConflict(f"channel {channel}", None, None)


def _promote_once(repo, rev, channel, contract, force, reason) -> Move:
    by = current_user()
    with repo.db.write() as conn:
        cid, line = _target(conn, rev, channel)
        current = refs.get_ref(conn, line, channel)
        if current is not None and current.target == cid:
            return _move(conn, current.entry)  # already there: nothing moves, nothing is logged
        report = _gate(conn, cid, line, channel, contract)
        if not report.ok and not force:
            raise GateRefused(f"gate refused {cid[:12]} for {line}@{channel}", report)
        entry = refs.set_ref(
            conn, line=line, name=channel, kind="channel", expected=current.target if current else None,
            new=cid, by=by, action="force" if (force and not report.ok) else "promote", reason=reason,
            contract=_contract_ids(conn, report), evaluations=report.evaluations,
            back=current.entry if current else None, expected_entry=current.entry if current else None,
        )  # fmt: skip
        return _move(conn, entry)


def _contract_ids(conn, report: GateReport) -> str | None:
    """The history keeps the id of the (first) contract version the gate applied."""
    if not report.contracts:
        return None
    name, _, v = report.contracts[0].partition("@v")
    return ct.get_row(conn, name, int(v)).id


def rollback(repo: Repo, ref: str, *, to: str | None = None, reason: str | None = None) -> Move:
    """Move LINE@CHANNEL back to the holder before the current one, or to REV."""
    line, _, channel = ref.partition("@")
    if not line or not channel:
        raise RevisionNotFound(ref, "expected LINE@CHANNEL")
    by = current_user()
    with repo.db.write() as conn:
        current = refs.get_ref(conn, line, channel)
        if current is None or current.kind != "channel":
            raise RevisionNotFound(ref, "unknown channel")
        if to is not None:
            return _rollback_to(conn, current, line, channel, to, by, reason)
        top = _entry(conn, current.entry)
        if top.back is None:
            raise RevisionNotFound(ref, "nothing to roll back to: the channel has had one holder")
        target = _entry(conn, top.back)
        entry = refs.set_ref(
            conn, line=line, name=channel, kind="channel", expected=current.target, new=target.new,
            by=by, action="rollback", reason=reason, contract=target.contract,
            evaluations=target.evaluations, back=target.back, expected_entry=current.entry,
        )  # fmt: skip
        return _move(conn, entry)


def _rollback_to(conn, current, line, channel, rev, by, reason) -> Move:
    cid = refs.resolve(conn, rev).id
    if cm.commit_row(conn, cid).line != line:
        raise RevisionNotFound(rev, f"not a commit of line {line}")
    contract, evals = None, []
    if not _has_held(conn, cid, line, channel):  # a newcomer goes through the gate
        report = _gate(conn, cid, line, channel)
        if not report.ok:
            raise GateRefused(f"gate refused {cid[:12]} for {line}@{channel}", report)
        contract, evals = _contract_ids(conn, report), report.evaluations
    entry = refs.set_ref(
        conn, line=line, name=channel, kind="channel", expected=current.target, new=cid, by=by,
        action="rollback", reason=reason, contract=contract, evaluations=evals,
        back=current.entry, expected_entry=current.entry,
    )  # fmt: skip
    return _move(conn, entry)


def _entry(conn, entry_id: int):
    return conn.execute(sa.select(s.ref_history).where(s.ref_history.c.id == entry_id)).one()


def _move(conn, entry_id: int) -> Move:
    return _as_move(_entry(conn, entry_id))


def _as_move(r) -> Move:
    return Move(r.id, iso(r.at), r.action, r.line, r.name, r.old, r.new, r.by, r.reason, r.contract, r.evaluations or [])


def history(repo: Repo, ref: str) -> list[Move]:
    """Every move of LINE@CHANNEL, oldest first. History is never edited or deleted."""
    line, _, channel = ref.partition("@")
    if not line or not channel:
        raise RevisionNotFound(ref, "expected LINE@CHANNEL")
    with repo.db.read() as conn:
        q = sa.select(s.ref_history).where(
            s.ref_history.c.line == line, s.ref_history.c.name == channel, s.ref_history.c.kind == "channel"
        )
        moves = [_as_move(r) for r in conn.execute(q.order_by(s.ref_history.c.id))]
    if not moves:
        raise RevisionNotFound(ref, "unknown channel")
    return moves


def approve(repo: Repo, rev: str, channel: str) -> Approval:
    """Record the current user's approval of REV for CHANNEL. A user counts once."""
    by = current_user()
    with repo.db.write() as conn:
        cid, _ = _target(conn, rev, channel)
        q = sa.select(s.approvals).where(
            s.approvals.c.commit_id == cid, s.approvals.c.channel == channel, s.approvals.c.by == by
        )
        row = conn.execute(q).first()
        if row is not None:
            return Approval(CommitId(cid), channel, by, iso(row.at), created=False)
        now = utcnow()
        conn.execute(s.approvals.insert().values(commit_id=cid, channel=channel, by=by, at=now))
        return Approval(CommitId(cid), channel, by, iso(now), created=True)


def status(repo: Repo) -> list[LineStatus]:
    """Every line with its head and the holder of each of its channels."""
    with repo.db.read() as conn:
        channels: dict[str, dict[str, str]] = {}
        for r in conn.execute(sa.select(s.refs).where(s.refs.c.kind == "channel")):
            channels.setdefault(r.line, {})[r.name] = r.target
        rows = conn.execute(sa.select(s.lines).order_by(s.lines.c.name))
        return [LineStatus(r.name, r.kind, r.head, dict(sorted(channels.get(r.name, {}).items()))) for r in rows]
