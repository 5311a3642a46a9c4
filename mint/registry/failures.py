"""One table from errors to HTTP statuses, and the JSON every error answers with:
`{"error": {"type": "<ErrorClass>", "message": "<one line>", "detail": {...}?}}`, where
`detail` holds the error's fields (`mint.errors.error_fields`) for the client to rebuild it.

A class not in the table takes the status of its nearest listed base. Anything that is not
an expected error is a bug: it is logged with its traceback (never a request's headers) and
answered with a 500 that names no internals.
"""

from __future__ import annotations

import json
import logging

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from mint import errors as e
from mint.jsonable import to_jsonable

log = logging.getLogger("mint.registry")


# Error class -> HTTP status. MintError's own status (400) is the fallback.
STATUS: dict[type[BaseException], int] = {
    e.Unauthenticated: 401,
    e.Forbidden: 403,
    e.RevisionNotFound: 404,
    e.UnknownToken: 404,
    e.UnknownWebhook: 404,
    e.DatasetNotFound: 404,
    e.TraceNotFound: 404,
    e.TokenExists: 409,
    e.BlobMissing: 404,
    e.RefConflict: 409,
    e.ContractConflict: 409,
    e.ContractAmbiguous: 409,
    e.ProposalClosed: 409,
    e.NothingToPropose: 409,
    e.RefExists: 409,
    e.ReservedName: 409,
    e.ChannelTypo: 422,
    e.ChannelGuarded: 409,
    e.NotFastForward: 409,
    e.GateRefused: 409,
    e.NothingToRollBack: 409,
    e.NoCanary: 404,
    e.CanaryOpen: 409,
    e.MoveStatementMismatch: 409,
    e.InvalidName: 422,
    e.InvalidWebhookUrl: 422,
    e.InvalidConfig: 422,
    e.InvalidForm: 400,
    e.InvalidAdapter: 422,
    e.InvalidObject: 422,
    e.MissingObjects: 422,
    e.AmbiguousRevision: 422,
    e.UnknownBase: 422,
    e.BaseMismatch: 422,
    e.UnsafePath: 422,
    e.WrongKind: 422,
    e.ForceNeedsReason: 422,
    e.EvaluationFailed: 422,
    e.MergeMismatch: 422,
    e.BlobChanged: 422,
    e.InvalidReport: 422,
    e.TooManyInstances: 429,
    e.NotConverged: 409,
    e.BlobCorrupt: 500,  # the server's own bytes are damaged: not the client's doing
    e.DatabaseUnavailable: 503,
    e.SchemaOutdated: 503,
    e.StoreError: 500,
    e.MintError: 400,
}


def status_of(exc: BaseException) -> int:
    for klass in type(exc).__mro__:
        if klass in STATUS:
            return STATUS[klass]
    return 500


def error_response(
    status: int, kind: str, message: str, detail=None, headers=None
) -> JSONResponse:
    body: dict = {"type": kind, "message": " ".join(str(message).split())}
    if detail is not None:
        body["detail"] = detail
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def error_detail(exc: BaseException):
    """EXC's data as the answer's `detail`: each of its constructor's fields by name, so the
    client rebuilds the same class with the same fields (`mint.remote.http.rebuild`)."""
    if isinstance(exc, e.GateRefused):
        return to_jsonable(exc.report)  # documented as the GateReport itself
    names = e.error_fields(type(exc))
    if not names:
        return None
    # A value JSON cannot hold (none should be) travels as its text rather than failing a 500.
    return json.loads(json.dumps({n: to_jsonable(_field(exc, n)) for n in names}, default=str))


def _field(exc: BaseException, name: str):
    if name == "message" and not hasattr(exc, name):
        return str(exc)  # a class whose text is its data (RegistryError, HubRevisionNotFound)
    return getattr(exc, name, None)


async def on_mint_error(request: Request, exc: Exception) -> JSONResponse:
    status = status_of(exc)
    if status >= 500:
        log.error("%s %s failed: %s", request.method, request.url.path, exc, exc_info=exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if status == 429:
        headers = {"Retry-After": "30"}  # a live instance goes stale within three intervals
    return error_response(status, type(exc).__name__, str(exc), error_detail(exc), headers)


async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    problems = exc.errors() if isinstance(exc, RequestValidationError) else []
    first = problems[0] if problems else {}
    where = ".".join(str(p) for p in first.get("loc", ()))
    message = f"{where}: {first.get('msg', 'invalid request')}" if where else "invalid request"
    detail = [{"loc": list(p.get("loc", ())), "msg": p.get("msg", "")} for p in problems[:20]]
    return error_response(
        422, "InvalidRequest", message, json.loads(json.dumps(detail, default=str))
    )


_HTTP_TYPES = {
    400: "BadRequest",
    404: "NotFound",
    405: "MethodNotAllowed",
    411: "LengthRequired",
    413: "PayloadTooLarge",
    416: "RangeNotSatisfiable",
}


async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    kind = _HTTP_TYPES.get(exc.status_code, "HTTPError")
    return error_response(exc.status_code, kind, str(exc.detail), headers=exc.headers)


async def on_disconnect(request: Request, exc: Exception) -> JSONResponse:
    # The client went away mid-request (an upload cut off): nothing was stored, nobody listens.
    return error_response(400, "ClientDisconnect", "the client disconnected before the end")


async def on_data_error(request: Request, exc: Exception) -> JSONResponse:
    # The database refused a value (too long, out of range): the input's fault, not a bug.
    why = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
    return error_response(422, "InvalidValue", f"the database refused a value: {why}")


async def on_bug(request: Request, exc: Exception) -> JSONResponse:
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return error_response(500, "InternalError", "internal error; the server's log has the details")


def install(app: FastAPI) -> None:
    """Answer every error as JSON: expected ones with their status, bugs with a logged 500."""
    app.add_exception_handler(e.MintError, on_mint_error)
    app.add_exception_handler(e.StoreError, on_mint_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(HTTPException, on_http_error)
    app.add_exception_handler(ClientDisconnect, on_disconnect)
    app.add_exception_handler(sa.exc.DataError, on_data_error)
    app.add_exception_handler(Exception, on_bug)
