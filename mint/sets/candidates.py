"""Candidate sets: the configurations one step from a channel's holder, and `set derive`,
which commits one of them without a mol.toml written by hand.

Members are named by label: the router is `router`, the summary adapter `summary`, and
each expert its label (mol.toml's checkout layout already keeps these three kinds of
names apart). A member line is the line the member's commit lies on; swapping a line in
replaces every member that comes from it (an expert line may also be the summary's).
"""

from __future__ import annotations

import copy
import dataclasses

import sqlalchemy as sa

from mint import schema as s
from mint.bases import get_base
from mint.commits import rows
from mint.commits.operations import line_head, record
from mint.errors import InvalidConfig, RevisionNotFound, WrongKind
from mint.ids import CommitId, Kind, Role, utcnow
from mint.objects import Candidate, CommitDetail, CommitResult, Member
from mint.refs import RefsContainer, check_text, resolve
from mint.repo import Repo
from mint.sets.operations import pin_member

ROUTER, SUMMARY = "router", "summary"


def candidates(repo: Repo, ref: str, lines: list[str] | None = None) -> list[Candidate]:
    """The holder of SET_LINE@CHANNEL with each member line's head swapped in, one line at
    a time, then all of them together; only swaps that change something. LINES limits the
    lines swapped (each must be a line some member comes from)."""
    set_line, _, channel = ref.partition("@")
    if not set_line or not channel:
        raise RevisionNotFound(ref, "expected SET_LINE@CHANNEL")
    with repo.db.read() as conn:
        holder = RefsContainer(conn).get(set_line, channel)
        if holder is None:
            raise RevisionNotFound(ref, "unknown channel")
        detail = _set_detail(conn, holder.target)
        sources = {m.label: rows.commit_row(conn, m.commit_id).line for m in detail.members}
        swaps = [_swap(conn, detail, sources, line) for line in _lines(sources, lines)]
        swaps = [s for s in swaps if s is not None]
        if len(swaps) > 1:
            merged = {label: cid for uses, _ in swaps for label, cid in uses.items()}
            swaps.append((merged, [line for _, used in swaps for line in used]))
        return [_candidate(conn, detail, uses, used) for uses, used in swaps]


def _lines(sources: dict[str, str], wanted: list[str] | None) -> list[str]:
    known = list(dict.fromkeys(sources.values()))
    if not wanted:
        return known
    for line in wanted:
        if line not in known:
            raise InvalidConfig(
                f"no member of the set comes from line {line} (they come from {', '.join(known)})"
            )
    return list(dict.fromkeys(wanted))


def _swap(conn, detail: CommitDetail, sources: dict[str, str], line: str):
    """(label -> LINE's head, [LINE]) for the members from LINE that the head changes."""
    head = RefsContainer(conn).head(line)
    current = members_of(detail)
    uses = {lab: head for lab, src in sources.items() if src == line and current[lab] != head}
    return (uses, [line]) if uses else None


def _candidate(conn, detail: CommitDetail, uses: dict, used: list[str]) -> Candidate:
    members = members_of(detail) | uses
    changed = [label for label in members if label in uses]
    what = ", ".join(f"{label} {members[label][:12]}" for label in changed)
    description = f"{' + '.join(used)} head{'s' if len(used) > 1 else ''}: {what}"
    pinned = [dataclasses.replace(m, commit_id=members[m.label]) for m in detail.members]
    existing = existing_set(conn, detail.line, _tree(detail, pinned))
    return Candidate(description, detail.id, members, changed, used, existing)


def members_of(detail: CommitDetail) -> dict[str, str]:
    """label -> commit of a set's members: router first, the experts, summary last."""
    order = {Role.ROUTER: 0, Role.EXPERT: 1, Role.SUMMARY: 2}
    experts = {label: i for i, label in enumerate(detail.config["router"]["labels"])}
    ms = sorted(detail.members, key=lambda m: (order[m.role], experts.get(m.label, 0)))
    return {m.label: m.commit_id for m in ms}


def _tree(detail: CommitDetail, members: list[Member]) -> str:
    return rows.tree_of(detail.files, detail.base_fingerprint, members)


def existing_set(conn, line: str, tree: str) -> CommitId | None:
    """The newest set commit of LINE with content TREE (files, base and members)."""
    c = s.commits.c
    q = sa.select(c.id).where(c.line == line, c.kind == Kind.SET, c.tree == tree)
    row = conn.execute(q.order_by(c.created_at.desc(), c.id).limit(1)).first()
    return CommitId(row.id) if row else None


def role_of(detail: CommitDetail, label: str) -> Role:
    if label == ROUTER:
        return Role.ROUTER
    if label == SUMMARY:
        return Role.SUMMARY
    if label in detail.config["router"]["labels"]:
        return Role.EXPERT
    known = ", ".join(members_of(detail))
    raise InvalidConfig(f"set {detail.id[:12]} has no member labelled {label!r} ({known})")


def _set_detail(conn, cid: str) -> CommitDetail:
    detail = rows.detail(conn, cid)
    if detail.kind != Kind.SET:
        raise WrongKind(f"{cid[:12]} is an {detail.kind} commit, not a set")
    return detail


# --- set derive ------------------------------------------------------------------------


def set_derive(
    repo: Repo,
    rev: str,
    uses: dict[str, str],
    *,
    message: str | None = None,
    author: str,
) -> CommitResult:
    """Commit REV's set with the members USES names (label -> adapter revision) replaced,
    on REV's line. Its first parent is REV; when REV is not the line's head, the head is
    the second, so every head of a line still descends from the one before. A set of the
    line that already has exactly this content is answered instead (created False)."""
    if not uses:
        raise InvalidConfig("a derived set replaces at least one member")
    check_text("message", message)
    with repo.db.read() as conn:
        detail = _set_detail(conn, resolve(conn, rev).id)
        base = get_base(conn, detail.base)
        new = {
            lab: pin_member(conn, role_of(detail, lab), lab, ref, base)
            for lab, ref in uses.items()
        }
        members = [new.get(m.label, m) for m in detail.members]
        head, _ = line_head(conn, detail.line, Kind.SET)
        existing = existing_set(conn, detail.line, _tree(detail, members))
    if existing is not None:
        return CommitResult(existing, detail.line, [], created=False)
    pins = {label: m.commit_id for label, m in new.items()}
    what = ", ".join(f"{label}={cid[:12]}" for label, cid in pins.items())
    commit = rows.NewCommit(
        kind=Kind.SET,
        line=detail.line,
        parents=[detail.id] + ([head] if head and head != detail.id else []),
        files=detail.files,
        base=detail.base,
        base_fingerprint=detail.base_fingerprint,
        message=message or f"derived from {detail.id[:12]}: {what}",
        author=author,
        created_at=utcnow().isoformat(),
        meta={},
        provenance={"derived_from": detail.id, "uses": pins},
        config=derived_config(detail.config, pins),
        members=members,
    )
    return record(repo, commit, head, lambda: 0)


def derived_config(config: dict, pins: dict[str, str]) -> dict:
    """A set's pinned configuration with the members PINS names (label -> commit) replaced."""
    out = copy.deepcopy(config)
    for label, cid in pins.items():
        if label in (ROUTER, SUMMARY):
            out[label]["adapter"] = cid
        else:
            out["experts"][label] = cid
    return out
