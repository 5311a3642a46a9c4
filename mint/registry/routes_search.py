"""GET /api/v1/search (role: reader): `mint search` on the registry, limited to the lines the
token may read, as `mint.search.search` answers it. A condition that is not one is a 400."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import StringConstraints

from mint import api, objects
from mint.registry.auth import Reader, RepoDep
from mint.registry.models import Name
from mint.registry.render import MintJSON, answer
from mint.registry.schemas import ERROR_RESPONSES, list_of

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES, tags=["reads"])

Condition = Annotated[str, StringConstraints(min_length=1, max_length=1000)]
Conditions = Annotated[list[Condition], Query(max_length=32)]
Text = Annotated[str, StringConstraints(min_length=1, max_length=200)]


@router.get("/search", response_model=list_of(objects.CommitInfo))
def search(
    repo: RepoDep,
    who: Reader,
    meta: Annotated[Conditions, Query(description="KEY=VALUE (repeatable)")] = [],  # noqa: B006
    metric: Annotated[Conditions, Query(description="NAME>=X, or >, <=, <, = (repeatable)")] = [],  # noqa: B006
    tag: Annotated[Conditions, Query(description="a tag's name, on any line")] = [],  # noqa: B006
    line: Annotated[Name | None, Query(description="a glob of line names")] = None,
    author: Annotated[Text | None, Query(description="the commits' author")] = None,
    n: Annotated[int | None, Query(ge=1, le=100_000, description="at most N commits")] = None,
) -> MintJSON:
    """The commits that meet every condition, newest first, on lines the token may read."""
    readable = who.may_touch if who.lines is not None else None
    found = api.search(
        repo, meta=meta, metric=metric, tag=tag, line=line, author=author, n=n, readable=readable
    )
    return answer(found)
