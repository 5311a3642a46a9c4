"""Tags: immutable names for commits. Moving one needs force, and the move is logged."""

from __future__ import annotations

import sqlalchemy as sa

from mint import schema as s
from mint.errors import RevisionNotFound, TagExists, WrongKind
from mint.ids import Action, CommitId, RefKind, iso
from mint.objects import RefInfo
from mint.refs.channel_names import check_tag_name
from mint.refs.container import Ref, RefsContainer
from mint.refs.revisions import (
    check_local_ref,
    check_name,
    check_text,
    line_of,
    near_refs,
    resolve,
)
from mint.repo import Repo


def split_tag(tag: str, line: str) -> tuple[str, str]:
    """TAG or LINE@TAG, for a commit on LINE: (line, tag name)."""
    if "@" in tag:
        tline, _, tname = tag.partition("@")
        if tline != line:
            raise WrongKind(f"{tag} names line {tline}, but the commit is on {line}")
        return tline, tname
    return line, tag


def tag(
    repo: Repo,
    tag_name: str,
    rev: str,
    *,
    by: str,
    message: str | None = None,
    force: bool = False,
) -> RefInfo:
    """Make LINE@TAG point at REV. Moving an existing tag needs force, and is logged."""
    with repo.db.write() as conn:
        return tag_in(conn, tag_name, rev, by=by, message=message, force=force)


def tag_in(conn, tag_name: str, rev: str, *, by: str, message=None, force=False) -> RefInfo:
    """`tag` inside the caller's transaction (a pull tags in the transaction it commits in)."""
    check_text("message", message)
    target = resolve(conn, rev).id
    line, name = split_tag(tag_name, line_of(conn, target))
    check_name("tag", name)
    refs = RefsContainer(conn)
    existing = refs.get(line, name)
    if existing is not None and existing.kind == RefKind.TAG and existing.target == target:
        return ref_info(existing)
    # Every door that makes a tag comes here: none may make one that answers for a channel.
    check_tag_name(conn, line, name)
    if existing is not None and not force:
        raise TagExists(f"{line}@{name}", existing.target)
    action = Action.FORCE if existing else Action.CREATE
    refs.set_if_equals(
        line, name, existing, target, kind=RefKind.TAG, by=by, action=action, message=message
    )
    return ref_info(refs.get(line, name))


def tag_list(repo: Repo, line: str | None = None, kind: RefKind = RefKind.TAG) -> list[RefInfo]:
    """Tags (or channels) of LINE, or of every line."""
    with repo.db.read() as conn:
        q = sa.select(s.refs).where(s.refs.c.kind == kind)
        if line:
            q = q.where(s.refs.c.line == line)
        rows_ = conn.execute(q.order_by(s.refs.c.line, s.refs.c.name))
        return [
            RefInfo(
                r.line, r.name, RefKind(r.kind), CommitId(r.target), r.message, iso(r.updated_at)
            )
            for r in rows_
        ]


def tag_delete(repo: Repo, ref: str, *, by: str) -> RefInfo:
    """Delete LINE@TAG (logged)."""
    line, _, name = ref.partition("@")
    if not line or not name:
        raise RevisionNotFound(ref, "expected LINE@TAG")
    check_local_ref("tag", name)
    with repo.db.write() as conn:
        refs = RefsContainer(conn)
        found = refs.get(line, name)
        if found is None or found.kind != RefKind.TAG:
            raise RevisionNotFound(ref, "no such tag", near_refs(conn, line, name, RefKind.TAG))
        refs.remove_if_equals(found, by=by)
        return ref_info(found)


def ref_info(ref: Ref) -> RefInfo:
    return RefInfo(
        ref.line, ref.name, ref.kind, CommitId(ref.target), ref.message, iso(ref.updated_at)
    )
