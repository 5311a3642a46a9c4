"""Push and fetch (`mint.transfer`): commit objects in, the line head moved by
compare-and-swap (fast-forward only unless forced), and a line's objects out."""

from __future__ import annotations

from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import APIRouter, Query
from pydantic import BaseModel

from mint import api, objects, transfer
from mint import schema as s
from mint.errors import Forbidden, RevisionNotFound
from mint.registry import queries
from mint.registry.auth import Reader, RepoDep, Writer, check_line, need
from mint.registry.models import MAX_IDS, HeadBody, HeadMoved, Id64, Imported, Name, ObjectsBody
from mint.registry.render import MintJSON, answer
from mint.registry.schemas import ERROR_RESPONSES, list_of
from mint.registry.tokens import Access, Identity

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES, tags=["transfer"])


class LineObjects(BaseModel):
    head: str
    commits: list[dict[str, Any]]
    evaluations: list[dict[str, Any]]
    bases: list[dict[str, Any]]
    tags: list_of(objects.RefInfo)  # type: ignore[valid-type]


@router.post("/objects", response_model=Imported)
def receive_objects(repo: RepoDep, who: Writer, body: ObjectsBody) -> MintJSON:
    """Record commits (ids recomputed), the bases they are bound to and their evaluations;
    every blob they name must be stored already. The pusher is recorded beside each author."""
    payload = body.model_dump()
    _check_payload(repo, who, payload)
    result = transfer.import_objects(repo, payload, pushed_by=who.name)
    return answer({"stored": result.stored, "present": result.present})


def _check_payload(repo, who: Identity, payload: dict) -> None:
    """The token's lines must hold every commit and evaluated commit; only an admin adds
    contract versions (by pushing evaluations made under them)."""
    lines = {c["id"]: c["line"] for c in payload["commits"] if _str(c, "id") and _str(c, "line")}
    if who.lines is not None:
        evaluated = [e["commit"] for e in payload["evaluations"] if _str(e, "commit")]
        known = queries.commit_lines(repo, [i for i in evaluated if i not in lines])
        for line in {**known, **lines}.values():
            check_line(who, line)
    pairs = {
        (e["contract"]["name"], e["contract"]["version"])
        for e in payload["evaluations"]
        if isinstance(e.get("contract"), dict)
        and _str(e["contract"], "name")
        and type(e["contract"].get("version")) is int
    }
    unknown = queries.unknown_contract_versions(repo, pairs) if pairs else []
    if unknown and not who.role.allows(Access.ADMIN):
        raise Forbidden(who.name, f"add contract {unknown[0]} by push: that needs an admin")


def _str(d: dict, key: str) -> bool:
    return isinstance(d.get(key), str)


@router.post("/lines/{line:path}/head", response_model=HeadMoved)
def move_head(repo: RepoDep, who: Writer, line: Name, body: HeadBody) -> MintJSON:
    """Move LINE's head from OLD (null: a new line) to NEW; 409 if it is not at OLD, or NEW
    does not descend from it (unless forced: a maintainer's)."""
    check_line(who, line)
    if body.force:
        need(who, Access.MAINTAINER, "force a line head")
    transfer.move_head(repo, line, body.old, body.new, force=body.force, by=who.name)
    return answer({"line": line, "head": body.new})


@router.get("/lines/{line:path}/objects", response_model=LineObjects)
def line_objects(
    repo: RepoDep,
    who: Reader,
    line: Name,
    have: Annotated[list[Id64] | None, Query(max_length=MAX_IDS)] = None,
) -> MintJSON:
    """Everything reachable from LINE's head that is not reachable from any HAVE."""
    check_line(who, line)
    tags = api.tag_list(repo, line)  # first: every tag then read points at a commit by now
    with repo.db.read() as conn:
        head = conn.execute(sa.select(s.lines.c.head).where(s.lines.c.name == line)).scalar()
        if head is None:
            raise RevisionNotFound(line, "unknown line")
        payload = transfer.export_objects(conn, transfer.reachable(conn, [head], have or []))
    return answer({"head": head, **payload, "tags": tags})
