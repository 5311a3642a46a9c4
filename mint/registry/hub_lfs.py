"""The Git LFS batch API with the `basic` transfer, as huggingface_hub uploads large files
(issue 37): `POST /{repo}.git/info/lfs/objects/batch` answers, for each blob the registry
lacks (or a token limited to lines may not name yet), where to PUT its bytes and where to
confirm them.

- On a local store the PUT comes to the registry (`PUT /api/v1/blobs/hub/{oid}`): the bytes
  are hashed as they arrive and stored only if they are the oid's (`upload.receive_blob`).
- On an S3 store the PUT goes to a presigned URL of a temporary object; the `verify` action
  (`POST /api/v1/blobs/hub/{oid}/verify`, with the token) hashes it back and only then
  publishes it as the blob (`S3ObjectStore.publish_temp`).

Either way no commit can name the bytes before they are verified: a commit's `lfsFile` must
name a stored blob. The client sends the PUT without its token, so each action's URL carries
a ticket: the token's name, the blob, its size and a time, signed by an HMAC keyed by the
token's stored hash. Any replica over the same database checks it (nothing is stored), and a
ticket of a token revoked since is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from urllib.parse import urlencode

import sqlalchemy as sa
from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response

from mint import errors as e
from mint import schema as s
from mint.exchange import possession, received
from mint.registry.hf_protocol import HubMiss
from mint.registry.hub_learn import Learning, keep
from mint.registry.hub_write import hub_answers, hub_identity, may_write
from mint.registry.upload import receive_blob
from mint.team.tokens import Access, token_hash

router = APIRouter(include_in_schema=False)
TICKET_SECONDS = 3600  # how long an upload's URLs hold
BATCH_OBJECTS = 1000  # objects in one batch request, at most
LFS_JSON = "application/vnd.git-lfs+json"
UPLOAD = "/api/v1/blobs/hub"  # under the blob prefix: the blob size limit holds (limits.py)


def _mac(key: str, name: str, oid: str, size: int, t: int) -> str:
    text = f"mint-hub-upload\n{name}\n{oid}\n{size}\n{t}"
    return hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest()


def _ticket(secret: str, name: str, oid: str, size: int) -> dict:
    t = time.time_ns()
    return {"by": name, "size": size, "t": t, "mac": _mac(token_hash(secret), name, oid, size, t)}


@router.post("/{a}.git/info/lfs/objects/batch")
async def batch_one(request: Request, a: str) -> Response:
    return await _batch(request, a)


@router.post("/{a}/{b}.git/info/lfs/objects/batch")
async def batch_two(request: Request, a: str, b: str) -> Response:
    return await _batch(request, f"{a}/{b}")


async def _batch(request: Request, line: str) -> Response:
    who = hub_identity(request)
    try:
        body = await request.json()
    except ValueError:
        raise HubMiss("BadRequest", "the LFS batch request is not JSON", status=400) from None
    with hub_answers():
        may_write(who, line, propose=True)  # a proposal's bytes come this way too
        objects = _objects(body)
        repo = request.app.state.repo
        wanted = [oid for oid, _ in objects if not repo.store.has(oid)]
        if who.lines is not None:
            stored = [oid for oid, _ in objects if oid not in wanted]
            with repo.db.read() as conn:
                wanted += possession.unproven(conn, stored, token=who.name, may_read=who.may_touch)
    secret = request.headers["authorization"].partition(" ")[2].strip()
    base = str(request.base_url).rstrip("/")
    presign = getattr(repo.store, "presigned_put", None)
    answers = []
    for oid, size in objects:
        item: dict = {"oid": oid, "size": size, "authenticated": True}
        if oid in wanted:
            ticket = _ticket(secret, who.name, oid, size)
            query = urlencode(ticket)
            put = {"href": f"{base}{UPLOAD}/{oid}?{query}", "expires_in": TICKET_SECONDS}
            if presign is not None:
                put = {"href": presign(_temp_name(oid, ticket), TICKET_SECONDS)}
            verify = {"href": f"{base}{UPLOAD}/{oid}/verify?{query}"}
            item["actions"] = {"upload": put, "verify": verify}
        answers.append(item)
    return JSONResponse(
        {"transfer": "basic", "objects": answers, "hash_algo": "sha256"},
        media_type=LFS_JSON,
    )


def _objects(body: object) -> list[tuple[str, int]]:
    if not isinstance(body, dict) or body.get("operation") != "upload":
        raise e.InvalidObject("an LFS batch request is {operation: upload, objects: [...]}")
    transfers = body.get("transfers", ["basic"])
    if not isinstance(transfers, list) or "basic" not in transfers:
        raise e.InvalidObject("mint's LFS API speaks the basic transfer only")
    items = received.listing(body.get("objects"), "the LFS batch's objects")
    if len(items) > BATCH_OBJECTS:
        raise e.InvalidObject(f"an LFS batch of {len(items)} objects: at most {BATCH_OBJECTS}")
    out = []
    for item in items:
        if not isinstance(item, dict):
            raise e.InvalidObject(f"an LFS object is {received.shown(item)}: {{oid, size}}")
        oid = received.hex64(item.get("oid"), "an LFS object's oid")
        out.append((oid, received.whole(item.get("size"), f"{oid[:12]}'s size")))
    return out


def _temp_name(oid: str, ticket: dict) -> str:
    """The S3 temporary object a ticket's presigned PUT writes (a temp name gc knows)."""
    return f"{ticket['t']}-{oid}"


def _checked(request: Request, oid: str) -> tuple[str, int, int, object]:
    """The ticket of an upload URL, checked: (token name, size, time, token row)."""
    q = request.query_params
    try:
        name, size, t, mac = q["by"], int(q["size"]), int(q["t"]), q["mac"]
    except (KeyError, ValueError):
        raise HubMiss("Forbidden", "the upload URL has no valid ticket", status=403) from None
    with request.app.state.repo.db.read() as conn:
        row = conn.execute(sa.select(s.tokens).where(s.tokens.c.name == name)).first()
    good = row is not None and row.revoked_at is None
    good = good and hmac.compare_digest(mac, _mac(row.hash, name, oid, size, t))
    if not good or Access(row.role).rank < Access.CONTRIBUTOR.rank:
        raise HubMiss("Forbidden", "the upload URL's ticket is not good here", status=403)
    if time.time_ns() > t + TICKET_SECONDS * 10**9:
        raise HubMiss("Forbidden", "the upload URL has expired: upload again", status=403)
    return name, size, t, row


@router.put(UPLOAD + "/{oid}")
async def upload(request: Request, oid: str) -> Response:
    """The `basic` transfer's PUT: the bytes, stored only if they hash to OID."""
    with hub_answers():
        oid = received.hex64(oid, "the blob id")
        name, size, _, row = _checked(request, oid)
        repo = request.app.state.repo
        learning = Learning(size)
        try:
            result = await receive_blob(repo, request.stream(), oid, learning)
        finally:
            learning.abandon()  # nothing, when it is done
        if result.size != size:
            raise e.InvalidObject(f"the blob is {result.size} bytes, the batch said {size}")
        grantee = name if row.lines is not None else None
        await run_in_threadpool(_received, repo, oid, grantee, learning.known)
    return JSONResponse({}, status_code=200)


@router.post(UPLOAD + "/{oid}/verify")
async def verify(request: Request, oid: str) -> Response:
    """The `verify` action: the blob is stored and whole (on S3, published only now)."""
    who = hub_identity(request)
    with hub_answers():
        oid = received.hex64(oid, "the blob id")
        name, size, t, row = _checked(request, oid)
        if who.name != name:
            raise e.Forbidden(who.name, "verify another token's upload")
        repo = request.app.state.repo
        publish = getattr(repo.store, "publish_temp", None)
        try:
            if publish is not None and not repo.store.has(oid):
                name_ = _temp_name(oid, {"t": t})
                await run_in_threadpool(publish, name_, oid, size)
            if repo.store.size(oid) != size:
                raise e.InvalidObject(f"blob {oid[:12]} is not {size} bytes")
        except e.BlobMissing:
            raise e.MissingObjects("blobs (the upload did not arrive: PUT it)", [oid]) from None
        if row.lines is not None:
            await run_in_threadpool(_grant, repo, name, oid)
    return JSONResponse({})


def _grant(repo, token: str, blob_id: str) -> None:
    with repo.db.write() as conn:
        possession.grant(conn, token, blob_id)


def _received(repo, oid: str, token: str | None, known) -> None:
    """After an upload of OID: its grant (TOKEN, limited to lines, uploaded it) and what the
    pass learnt of the bytes (KNOWN, or None)."""
    if token is None and known is None:
        return
    with repo.db.write() as conn:
        if token is not None:
            possession.grant(conn, token, oid)
        if known is not None:
            keep(conn, known)
