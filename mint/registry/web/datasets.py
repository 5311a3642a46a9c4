"""`GET /api/v1/datasets/{id}`: a recorded trace export by its sha256 (or a prefix of 7 or
more), for the commit page's link from training metadata (`data=`) and `mint dataset show`.

The one route for it: a token limited to lines reads a dataset only when it may read the line
of every trace the export holds (and of the set its filter names); an export of any line, or
one whose traces cannot be told, is refused to it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from mint import api, objects
from mint.errors import Forbidden
from mint.registry.auth import Reader, RepoDep
from mint.registry.render import MintJSON, answer
from mint.registry.schemas import ERROR_RESPONSES, model_of
from mint.traces.export import dataset_lines

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES, tags=["reads"])


@router.get("/datasets/{dataset_id}", response_model=model_of(objects.Dataset))
def dataset(
    repo: RepoDep,
    who: Reader,
    dataset_id: Annotated[str, Path(min_length=1, max_length=80)],
) -> MintJSON:
    found = api.dataset_show(repo, dataset_id)
    if who.lines is not None:  # an export may gather traces of any line
        lines = dataset_lines(repo, found)
        outside = sorted(line for line in lines or () if not who.may_touch(line))
        if lines is None or outside:
            why = (
                f"it holds traces of {', '.join(outside)}" if outside else "its lines are unknown"
            )
            raise Forbidden(who.name, f"read dataset {found.id[:12]}: {why}")
    return answer(found)
