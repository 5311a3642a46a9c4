"""Push and fetch (`mint.exchange`): commit objects in, the line head moved by
compare-and-swap (fast-forward only unless forced), and a line's objects out."""

from __future__ import annotations

from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import APIRouter, Query
from pydantic import BaseModel

from mint import api, objects
from mint import schema as s
from mint.errors import RevisionNotFound
from mint.exchange import heads, receiving, sending
from mint.registry.auth import Reader, RepoDep, Writer, check_line, need
from mint.registry.models import MAX_IDS, HeadBody, HeadMoved, Id64, Imported, Name, ObjectsBody
from mint.registry.render import MintJSON, answer
from mint.registry.schemas import ERROR_RESPONSES, list_of
from mint.team.tokens import Access

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES, tags=["transfer"])


class LineObjects(BaseModel):
    head: str
    commits: list[dict[str, Any]]
    evaluations: list[dict[str, Any]]
    signatures: list[dict[str, Any]] = []  # model-signing bundles (mint.signing)
    bases: list[dict[str, Any]]
    tags: list_of(objects.RefInfo)  # type: ignore[valid-type]


@router.post("/objects", response_model=Imported)
def receive_objects(repo: RepoDep, who: Writer, body: ObjectsBody) -> MintJSON:
    """Record commits (ids recomputed), the bases they are bound to and their evaluations;
    every blob they name must be stored already. The pusher is recorded beside each author.
    Then, in the same transaction, move each line of `heads` from OLD to NEW by
    compare-and-swap (fast-forward only unless forced: a maintainer's) and make each tag of
    `tags` that does not exist; a head that moved meanwhile, or a tag held elsewhere, is
    reported in the answer and stays where it is.

    Everything is checked inside the import's one transaction, as the local commands check
    it: the token must reach the line of every commit, of every set member and of every
    evaluated commit, and only an admin adds a contract version."""
    if any(m.force for m in body.heads):
        need(who, Access.MAINTAINER, "force a line head")
    for line in [m.line for m in body.heads] + [t.tag.partition("@")[0] for t in body.tags]:
        check_line(who, line)
    admission = receiving.Admission(
        by=who.name,
        check_line=lambda line: check_line(who, line),
        add_contracts=who.role.allows(Access.ADMIN),
        reads_line=who.may_touch if who.lines is not None else None,
    )
    payload = body.model_dump(include={"bases", "commits", "evaluations", "signatures"})
    result = receiving.import_objects(
        repo,
        payload,
        pushed_by=who.name,
        admission=admission,
        heads=[receiving.HeadMove(m.line, m.old, m.new, m.force) for m in body.heads],
        tags=[(t.tag, t.rev, t.message) for t in body.tags],
    )
    return answer(result)


@router.post("/lines/{line:path}/head", response_model=HeadMoved)
def move_head(repo: RepoDep, who: Writer, line: Name, body: HeadBody) -> MintJSON:
    """Move LINE's head from OLD (null: a new line) to NEW; 409 if it is not at OLD, or NEW
    does not descend from it (unless forced: a maintainer's). A set's head needs the token to
    reach every member's line, as pushing the set did."""
    check_line(who, line)
    if body.force:
        need(who, Access.MAINTAINER, "force a line head")
    if who.lines is not None:
        with repo.db.read() as conn:
            for member_line in heads.member_lines(conn, body.new):
                check_line(who, member_line)
    heads.move_head(repo, line, body.old, body.new, force=body.force, by=who.name)
    return answer({"line": line, "head": body.new})


@router.get("/lines/{line:path}/objects", response_model=LineObjects)
def line_objects(
    repo: RepoDep,
    who: Reader,
    line: Name,
    have: Annotated[list[Id64] | None, Query(max_length=MAX_IDS)] = None,
) -> MintJSON:
    """Everything reachable from LINE's head that is not reachable from any HAVE. A token
    limited to lines is refused when any of it shows a line outside them (a set's members)."""
    from mint.registry.auth import check_commits

    check_line(who, line)
    tags = api.tag_list(repo, line)  # first: every tag then read points at a commit by now
    with repo.db.read() as conn:
        head = conn.execute(sa.select(s.lines.c.head).where(s.lines.c.name == line)).scalar()
        if head is None:
            raise RevisionNotFound(line, "unknown line")
        ids = sending.reachable(conn, [head], have or [])
        check_commits(conn, who, ids, f"line {line}'s objects")
        payload = sending.export_objects(conn, ids)
    return answer({"head": head, **payload, "tags": tags})
