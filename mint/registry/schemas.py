"""Response models for `/openapi.json`, derived from the API's own dataclasses.

The server answers with `to_jsonable(result)` (the `--json` rendering); these pydantic models
only describe that JSON, so they are built from the dataclasses' fields and public
properties (a trailing underscore dropped: `from_` is "from") and can never drift from them.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from mint.jsonable import public_properties


class ErrorInfo(BaseModel):
    type: str
    message: str
    detail: Any = None


class ErrorBody(BaseModel):
    """Every error: `{"error": {"type", "message", "detail"?}}`."""

    error: ErrorInfo


_ERRORS = {
    400: "malformed request",
    401: "no token, or an unknown or revoked one",
    403: "the token's role or line globs do not allow this",
    404: "unknown line, revision, contract or blob",
    409: "a compare-and-swap lost, a moved tag, a refused gate",
    413: "body or upload over its limit",
    422: "malformed input",
}
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text} for code, text in _ERRORS.items()
}


@functools.cache
def model_of(cls: type) -> type[BaseModel]:
    """A pydantic model describing `to_jsonable(instance of CLS)` for a dataclass CLS."""
    hints = typing.get_type_hints(cls)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        name = f.name.rstrip("_")
        shown = Field(alias=name) if name != f.name else Field()
        fields[f.name] = (_annotation(hints[f.name]), shown)
    for name in public_properties(cls):
        returns = typing.get_type_hints(getattr(cls, name).fget).get("return", Any)
        fields[name] = (_annotation(returns), Field())
    config = ConfigDict(populate_by_name=True)
    return create_model(cls.__name__, __config__=config, **fields)


def _annotation(tp: Any) -> Any:
    """TP with every dataclass in it replaced by its model."""
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return model_of(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is None or not args:
        return tp
    converted = tuple(_annotation(a) for a in args)
    if origin in (types.UnionType, typing.Union):
        return functools.reduce(lambda a, b: a | b, converted)
    return origin[converted] if len(converted) > 1 else origin[converted[0]]


def list_of(cls: type) -> Any:
    return list[model_of(cls)]  # type: ignore[valid-type]
