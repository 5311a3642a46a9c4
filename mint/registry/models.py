"""Request bodies, validated by pydantic before any operation runs (malformed: 422).

Every string in a body is refused if it holds a NUL (no database column can keep one), and
lengths are bounded by the columns they end up in.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from mint.exchange.received import UNSTORABLE_TEXT
from mint.ids import EvalSource

HEX64 = r"^[0-9a-f]{64}$"
MAX_IDS = 10_000
MAX_LINES = 1000  # lines one push names

Rev = Annotated[str, StringConstraints(min_length=1, max_length=500)]
Name = Annotated[str, StringConstraints(min_length=1, max_length=100)]
Text = Annotated[str, StringConstraints(max_length=100_000)]
Id64 = Annotated[str, StringConstraints(pattern=HEX64)]


def _bad_text(value: Any, depth: int = 0) -> bool:
    """A string (anywhere in VALUE) with a NUL or a lone surrogate, which no column keeps, or
    nesting deeper than 64."""
    if isinstance(value, str):
        return UNSTORABLE_TEXT.search(value) is not None
    if depth > 64:
        return True
    if isinstance(value, dict):
        return any(_bad_text(k, depth + 1) or _bad_text(v, depth + 1) for k, v in value.items())
    if isinstance(value, list):
        return any(_bad_text(v, depth + 1) for v in value)
    return False


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_nul(cls, data: Any) -> Any:
        if _bad_text(data):
            raise ValueError(
                "no NUL characters or lone surrogates in strings, no nesting over 64 deep"
            )
        return data


class TagBody(Body):
    tag: Annotated[str, StringConstraints(min_length=1, max_length=201)]  # TAG or LINE@TAG
    rev: Rev
    message: Text | None = None
    force: bool = False


class ContractBody(Body):
    source: Annotated[str, StringConstraints(min_length=1, max_length=1024 * 1024)]  # TOML


class EvaluationBody(Body):
    rev: Rev
    contract: Name
    metrics: dict[Name, Any]  # checked by evaluation_values, as mint eval checks them
    source: EvalSource = EvalSource.MANUAL
    evaluator: dict[str, Any] | None = None
    data_hash: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None


class ApprovalBody(Body):
    rev: Rev
    channel: Name


class PromoteBody(Body):
    rev: Rev
    channel: Name
    contract: Name | None = None
    force: bool = False
    reason: Text | None = None


class RollbackBody(Body):
    ref: Rev  # LINE@CHANNEL
    to: Rev | None = None
    reason: Text | None = None


class TokenBody(Body):
    name: Name
    role: Name  # reader, contributor, writer, maintainer, admin (the operation says, when wrong)
    lines: Annotated[list[Name], Field(max_length=1000)] | None = None  # line globs


class ProtectBody(Body):
    channel: Name
    role: Name = "maintainer"
    signed: bool = False  # every move needs a signed statement by a trusted key
    keys: Annotated[list[Name], Field(max_length=100)] | None = None  # only these keys sign


class WebhookBody(Body):
    url: Annotated[str, StringConstraints(min_length=1, max_length=2000)]
    secret_env: Name  # the name of the registry process's variable, never the secret
    events: Annotated[list[Name], Field(max_length=100)] | None = None


class MissingBody(Body):
    ids: Annotated[list[Id64], Field(max_length=MAX_IDS)]
    lines: Annotated[list[Name], Field(max_length=MAX_LINES)] | None = None  # their heads too


class HeadBody(Body):
    old: Id64 | None
    new: Id64
    force: bool = False


class LineMove(Body):
    line: Name
    old: Id64 | None
    new: Id64
    force: bool = False


class PushedTag(Body):
    tag: Annotated[str, StringConstraints(min_length=3, max_length=201)]  # LINE@TAG
    rev: Id64
    message: Text | None = None


class ObjectsBody(Body):
    """The wire format of `mint.exchange` (see docs/registry-api.md); checked there. HEADS
    move and TAGS are made in the import's transaction, once the objects are stored."""

    bases: list[dict[str, Any]] = []
    commits: list[dict[str, Any]] = []
    evaluations: list[dict[str, Any]] = []
    signatures: list[dict[str, Any]] = []  # model-signing bundles of the commits (mint.signing)
    heads: Annotated[list[LineMove], Field(max_length=MAX_LINES)] = []
    tags: Annotated[list[PushedTag], Field(max_length=MAX_IDS)] = []


class MissingBlobs(BaseModel):
    missing: list[str]
    heads: dict[str, str | None] | None = None  # asked for with `lines`; null: no such line


class StoredBlob(BaseModel):
    id: str
    size: int
    written: bool  # False: a good copy was already there


class StoredPack(BaseModel):
    blobs: list[StoredBlob]


class HeadMoved(BaseModel):
    line: str
    head: str


class HeadResult(BaseModel):
    line: str
    old: str | None
    new: str
    head: str | None  # where it is now
    result: str  # moved | conflict (it was not at old) | not-fast-forward


class TagResult(BaseModel):
    tag: str
    target: str
    there: str | None  # where the tag points now
    result: str  # created | present | elsewhere (a tag never moves by a push)


class Imported(BaseModel):
    stored: list[str]
    present: list[str]
    heads: list[HeadResult] = []
    tags: list[TagResult] = []
    signatures: int = 0  # bundles kept with commits (each was checked: mint.signing.stored)


class Resolved(BaseModel):
    id: str


class Found(BaseModel):
    id: str | None


class LineHead(BaseModel):
    head: str | None
    tree: str | None


class WhoAmI(BaseModel):
    name: str
    role: str
    lines: list[str] | None
