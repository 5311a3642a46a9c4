"""Blobs: which are missing, upload (streamed, checked against the id), download (checked
against the id before it is sent, `mint.registry.blob_send`; a `Range` is honoured).

A store that can presign (S3) serves large blobs itself: the download of a blob of at least
the server's presign threshold is answered with a 302 to a presigned URL, so the bytes go from
the bucket to the client; the client hashes them, as it does the registry's own answers.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from mint.exchange import possession
from mint.exchange.heads import line_heads
from mint.registry.auth import Reader, RepoDep, Uploader, check_blob, check_line
from mint.registry.blob_send import blob_body, byte_range
from mint.registry.models import HEX64, MissingBlobs, MissingBody, StoredBlob, StoredPack
from mint.registry.render import MintJSON, answer
from mint.registry.schemas import ERROR_RESPONSES
from mint.registry.upload import PackReader, pack_header, receive_blob

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES, tags=["blobs"])

BlobPath = Annotated[str, Path(pattern=HEX64, description="the blob's sha256 (hex)")]
OCTETS = "application/octet-stream"
PRESIGN_THRESHOLD = 1 << 20  # bytes: smaller blobs are sent by the registry itself
PRESIGN_SECONDS = 300  # how long a presigned URL lets its holder start a download
_BINARY = {"content": {OCTETS: {"schema": {"type": "string", "format": "binary"}}}}


def presigned(request: Request, blob_id: str, size: int) -> str | None:
    """Where to redirect a download of the blob: a presigned URL when the store makes them
    and SIZE reaches the server's threshold (None: no threshold), else None."""
    threshold = getattr(request.app.state, "presign_threshold", PRESIGN_THRESHOLD)
    make = getattr(request.app.state.repo.store, "presigned_url", None)
    if make is None or threshold is None or size < threshold:
        return None
    return make(blob_id, PRESIGN_SECONDS)


def redirect(url: str, headers: dict | None = None) -> Response:
    """A 302 to URL (a presigned URL on another host: clients drop their token there)."""
    return RedirectResponse(url, status_code=302, headers=headers)


@router.post("/blobs/missing", response_model=MissingBlobs)
def missing(repo: RepoDep, who: Uploader, body: MissingBody) -> MintJSON:
    """The ids of BODY that the store lacks, in the order given. For a token limited to lines,
    also the stored ones it may not read and has not uploaded: a push may name those only once
    it has sent their bytes (mint.exchange.possession), so an honest client uploads them.

    With `lines`, also where each of those lines' heads is (null: no such line), so that a
    push plans what to send from this one answer."""
    wanted = list(dict.fromkeys(body.ids))
    absent = {i for i in wanted if not repo.store.has(i)}
    for line in body.lines or []:
        check_line(who, line)
    heads = None
    if who.lines is not None or body.lines is not None:
        with repo.db.read() as conn:
            if who.lines is not None:
                stored = [i for i in wanted if i not in absent]
                absent.update(
                    possession.unproven(conn, stored, token=who.name, may_read=who.may_touch)
                )
            if body.lines is not None:
                heads = line_heads(conn, body.lines)
    found = {"missing": [i for i in wanted if i in absent]}
    return answer(found if heads is None else {**found, "heads": heads})


@router.get(
    "/blobs/{blob_id}",
    response_class=Response,
    responses={
        200: {**_BINARY, "description": "the bytes"},
        206: {**_BINARY, "description": "a range"},
        302: {"description": "a large blob: a presigned URL of the store (S3) to GET it from"},
    },
)
def download(repo: RepoDep, who: Reader, blob_id: BlobPath, request: Request) -> Response:
    check_blob(repo, who, blob_id)
    size = repo.store.size(blob_id)
    url = presigned(request, blob_id, size)
    if url is not None:
        return redirect(url)
    span = byte_range(request.headers.get("range"), size)
    return blob_body(repo.store, blob_id, size, span, {"Accept-Ranges": "bytes"}, OCTETS)


@router.put(
    "/blobs/{blob_id}",
    status_code=201,
    response_model=StoredBlob,
    responses={200: {"model": StoredBlob, "description": "already stored"}},
    openapi_extra={"requestBody": {**_BINARY, "required": True}},
)
async def upload(blob_id: BlobPath, request: Request, who: Uploader) -> MintJSON:
    """Store the body as blob BLOB_ID: 201 stored, 200 already there, 422 if the bytes hash
    to another id (then nothing is stored). Every byte is hashed even when the blob is stored
    already: for a token limited to lines the upload is its proof of holding the bytes, and
    is recorded as such (mint.exchange.possession)."""
    if "content-length" not in request.headers:
        raise HTTPException(411, "an upload needs a Content-Length")
    repo = request.app.state.repo
    result = await receive_blob(repo, request.stream(), blob_id)
    if who.lines is not None:
        await run_in_threadpool(_grant, repo, who.name, blob_id)
    return answer(result, 201 if result.written else 200)


@router.post(
    "/blobs/pack",
    response_model=StoredPack,
    openapi_extra={"requestBody": {**_BINARY, "required": True}},
)
async def upload_pack(request: Request, who: Uploader) -> MintJSON:
    """Store many blobs sent in one body: a header line of JSON, `{"blobs": [[id, size],
    ...]}`, then each blob's bytes in that order (mint.registry.upload). The header is checked
    before a blob is read: a malformed one, a size over the blob limit (413) or a body of
    another length than it announces stores nothing. Each blob is then stored once its bytes
    hash to its id; the first that does not ends the upload (422), nothing of it stored. As
    with a PUT, every blob's bytes are hashed, stored already or not, and for a token limited
    to lines each is recorded as uploaded by it (mint.exchange.possession)."""
    if "content-length" not in request.headers:
        raise HTTPException(411, "an upload needs a Content-Length")
    repo = request.app.state.repo
    reader = PackReader(request.stream())
    line = await reader.header_line()
    size = int(request.headers["content-length"])  # BodyLimit refused one that is no number
    entries = pack_header(line, size, request.app.state.limits.blob)
    stored = []
    try:
        for blob_id, blob_size in entries:
            stored.append(await receive_blob(repo, reader.take(blob_size), blob_id))
    finally:
        if who.lines is not None and stored:
            await run_in_threadpool(_grant, repo, who.name, *[r.id for r in stored])
    return answer({"blobs": stored})


def _grant(repo, token: str, *blob_ids: str) -> None:
    with repo.db.write() as conn:
        for blob_id in blob_ids:
            possession.grant(conn, token, blob_id)
