"""Proposals: a commit offered to a line by someone who may not write it (a contributor's
token, or any writer who wants review first), `refs/pr/N` on the Hub.

A proposal is made by the same operations that make a commit (`mint commit --propose`,
`mint set derive --propose`, the Hub's `create_commit(create_pr=True)`): the commit is built
and checked as any commit is and recorded in one transaction with its proposal row, but no
head moves. A writer of the line merges it: the head moves from the proposal's parent to its
commit by compare-and-swap (fast-forward only: a line that moved since is refused, and the
proposer proposes again on the new head), in the transaction that marks it merged, and the
move's history row names who proposed it and who merged it. The commit's author is the
proposer, so the gate's approvals never count the proposer's own (`self_approvers`).
"""

from __future__ import annotations

import dataclasses

import sqlalchemy as sa

from mint import schema as s
from mint.commits import rows
from mint.commits.repository import diff, record
from mint.db import is_unique_violation
from mint.errors import (
    InvalidName,
    InvalidObject,
    ProposalClosed,
    ProposalStale,
    RevisionNotFound,
    WrongKind,
)
from mint.ids import Action, CommitId, Kind, iso, utcnow
from mint.objects import CommitResult, Proposal, ProposalDetail
from mint.refs import RefsContainer, check_name
from mint.refs.revisions import check_text
from mint.repo import Repo

OPEN, MERGED, CLOSED = "open", "merged", "closed"
STATUSES = (OPEN, MERGED, CLOSED)
NUMBER_ATTEMPTS = 5  # two proposals to one line at once each take the next number


def record_proposal(
    repo: Repo, new: rows.NewCommit, head: str | None, store_blobs, description: str = ""
) -> CommitResult:
    """Store the blobs, then the commit NEW and its proposal to NEW's line (proposed on HEAD,
    the line's head when it was read) in one transaction; no head moves."""
    check_text("description", description)
    made: list[Proposal] = []

    def also(conn, cid: str) -> None:
        made.append(open_in(conn, new.line, cid, head, new.message, description, new.author))

    result = record(repo, new, head, store_blobs, also=also, advance=False)
    return dataclasses.replace(result, proposal=made[0].number)


def open_in(
    conn, line: str, cid: str, base: str | None, title: str, description: str, by: str
) -> Proposal:
    """Record a proposal of commit CID (a commit of LINE) to LINE, in the caller's
    transaction (CONN); it takes the line's next number."""
    kind = conn.execute(sa.select(s.lines.c.kind).where(s.lines.c.name == line)).scalar()
    if kind is None:
        raise RevisionNotFound(line, "no such line to propose to: a writer makes its first commit")
    if rows.commit_row(conn, cid).kind != kind:
        raise WrongKind(f"line {line} holds {kind} commits: a proposal to it is one too")
    p = s.proposals.c
    for attempt in range(NUMBER_ATTEMPTS):
        last = conn.execute(sa.select(sa.func.max(p.number)).where(p.line == line)).scalar()
        row = dict(
            line=line,
            number=(last or 0) + 1,
            commit_id=cid,
            base=base,
            title=title,
            description=description,
            status=OPEN,
            created_by=by,
            created_at=utcnow(),
        )
        try:
            with conn.begin_nested():
                conn.execute(s.proposals.insert().values(**row))
            return _proposal(_row(conn, line, row["number"]))
        except sa.exc.IntegrityError as exc:
            if not is_unique_violation(exc) or attempt == NUMBER_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def open_received(
    conn, commits: list, cid: str, base: str | None, description: str, by: str
) -> Proposal:
    """The proposal of commit CID, one of COMMITS just received (`mint.exchange.receiving`),
    to its line: `open_in` in the import's transaction."""
    new = next((c for c in commits if c.id == cid), None)
    if new is None:
        raise InvalidObject(f"a proposal names commit {cid[:12]}, which was not sent with it")
    return open_in(conn, new.line, cid, base, new.message, description, by)


def proposal_ls(repo: Repo, line: str | None = None, status: str | None = None) -> list[Proposal]:
    """Proposals of LINE (every line's without), newest first; STATUS: only those."""
    if status is not None and status not in STATUSES:
        raise InvalidName("proposal status", status, f"use one of {', '.join(STATUSES)}")
    p = s.proposals.c
    q = sa.select(s.proposals)
    if line is not None:
        q = q.where(p.line == line)
    if status is not None:
        q = q.where(p.status == status)
    with repo.db.read() as conn:
        return [_proposal(r) for r in conn.execute(q.order_by(p.id.desc()))]


def proposal_get(repo: Repo, line: str, number: int) -> Proposal:
    """Proposal NUMBER of LINE."""
    with repo.db.read() as conn:
        return _proposal(_one(conn, line, number))


def proposal_show(repo: Repo, line: str, number: int) -> ProposalDetail:
    """Proposal NUMBER of LINE with its diff against the line's head, its evaluations, and the
    gate of each channel that a contract guards on the line, for its commit."""
    from mint.gates.checks import gate_report
    from mint.gates.evaluations import evaluations_of

    with repo.db.read() as conn:
        found = _proposal(_one(conn, line, number))
        head = RefsContainer(conn).head(line)
        channels = guarded_channels(conn, line)
        gates = [gate_report(conn, found.commit_id, line, ch) for ch in channels]
    changes = diff(repo, head, found.commit_id) if head else None
    evaluations = evaluations_of(repo, found.commit_id)
    return ProposalDetail(found, head, changes, evaluations, gates)


def guarded_channels(conn, line: str) -> list[str]:
    """The channels that the latest contracts whose scope covers LINE guard, by name."""
    from mint.gates.contracts import covers, guard_is_old

    c = s.contracts.c
    q = sa.select(c.channel, c.lines).where(~guard_is_old())
    return sorted({r.channel for r in conn.execute(q) if covers(r.lines, line)})


def proposal_merge(repo: Repo, line: str, number: int, *, by: str) -> Proposal:
    """Move LINE's head to proposal NUMBER's commit, by compare-and-swap from the head it was
    proposed on (NotFastForward when the line moved since), and mark it merged by BY: one
    transaction, whose head move names the proposer and the merger."""
    with repo.db.write() as conn:
        found = _open(conn, line, number)
        refs = RefsContainer(conn)
        head = refs.head(line)
        if head != found.commit_id and head not in rows.parents_of(conn, found.commit_id):
            raise ProposalStale(line, number, head or "", found.commit_id)
        entry = None
        if head != found.commit_id:
            kind = Kind(rows.commit_row(conn, found.commit_id).kind)
            entry = refs.move_head(line, kind, head, found.commit_id, by=by, action=Action.MERGE)
            why = f"merged proposal {number} ({found.ref}) by {found.by}"
            h = s.ref_history.c
            conn.execute(s.ref_history.update().where(h.id == entry).values(reason=why))
        _close(conn, line, number, MERGED, by, entry)
        return _proposal(_row(conn, line, number))


def proposal_close(repo: Repo, line: str, number: int, *, by: str) -> Proposal:
    """Close proposal NUMBER of LINE without merging it (its commit stays, as every commit)."""
    with repo.db.write() as conn:
        _open(conn, line, number)
        _close(conn, line, number, CLOSED, by, None)
        return _proposal(_row(conn, line, number))


def proposal_of_commit(conn, line: str, number: int) -> CommitId:
    """The commit of proposal NUMBER of LINE (what `refs/pr/NUMBER` names)."""
    return _proposal(_one(conn, line, number)).commit_id


def _close(conn, line: str, number: int, status: str, by: str, entry: int | None) -> None:
    p = s.proposals.c
    q = s.proposals.update().where(p.line == line, p.number == number, p.status == OPEN)
    done = conn.execute(q.values(status=status, closed_by=by, closed_at=utcnow(), entry=entry))
    if done.rowcount != 1:  # closed or merged by another request meanwhile
        raise ProposalClosed(line, number, _row(conn, line, number).status)


def _open(conn, line: str, number: int) -> Proposal:
    found = _proposal(_one(conn, line, number))
    if found.status != OPEN:
        raise ProposalClosed(line, number, found.status)
    return found


def _one(conn, line: str, number: int):
    check_name("line", line)
    row = _row(conn, line, number)
    if row is None:
        raise RevisionNotFound(f"{line} proposal {number}", "no such proposal")
    return row


def _row(conn, line: str, number: int):
    p = s.proposals.c
    q = sa.select(s.proposals).where(p.line == line, p.number == number)
    return conn.execute(q).first()


def _proposal(r) -> Proposal:
    return Proposal(
        r.line,
        r.number,
        CommitId(r.commit_id),
        r.base,
        r.title,
        r.description,
        r.status,
        r.created_by,
        iso(r.created_at),
        r.closed_by,
        iso(r.closed_at),
    )
