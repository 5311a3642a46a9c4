"""`GET /api/v1/datasets/{id}`: a recorded trace export by its sha256 (or a prefix of 7 or
more), for the commit page's link from training metadata (`data=`) to the export it names."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from mint import api, objects
from mint.errors import Forbidden
from mint.registry.auth import Reader, RepoDep
from mint.registry.render import MintJSON, answer
from mint.registry.schemas import ERROR_RESPONSES, model_of

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES, tags=["reads"])


@router.get("/datasets/{dataset_id}", response_model=model_of(objects.Dataset))
def dataset(
    repo: RepoDep,
    who: Reader,
    dataset_id: Annotated[str, Path(min_length=1, max_length=80)],
) -> MintJSON:
    if who.lines is not None:  # an export gathers traces of any line
        raise Forbidden(who.name, "read a dataset: the token is limited to some lines")
    return answer(api.dataset_show(repo, dataset_id))
