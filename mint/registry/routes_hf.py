"""The Hub's download routes (`mint.registry.hf_protocol`): repo info, tree, refs and resolve,
read by an unmodified `huggingface_hub` client whose `HF_ENDPOINT` is this server.

Paths are parsed from the raw request path, so a revision quoted with `%2F` stays one segment.
Reads need a reader token unless the server was started with `--public-read`.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

from fastapi import APIRouter, FastAPI, Request
from starlette.convertors import PathConvertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response

from mint.errors import Forbidden
from mint.refs import find_line
from mint.registry import hub_lfs, hub_proposals, hub_write
from mint.registry.auth import check_commits, check_line, requires
from mint.registry.blob_send import blob_body, byte_range
from mint.registry.hf_protocol import (
    Check,
    HubFile,
    HubMiss,
    Snapshot,
    commits_of,
    is_line_name,
    miss_response,
    model_info,
    refs_of,
    snapshot,
    tree_items,
)
from mint.registry.routes_blobs import presigned, redirect
from mint.store.errors import BlobCorrupt
from mint.team.tokens import Access, Identity, authenticate


class _AnyPath(PathConvertor):
    """A path that may hold any decoded character: `.*` stops at a newline (`%0A` in a file
    name), and the route would then not match at all: an untyped 404 the client cannot read."""

    regex = "(?s:.*)"


register_url_convertor("hubpath", _AnyPath())  # before the routes below are compiled
router = APIRouter(tags=["hub"], include_in_schema=False)
PAGE = 1000
OCTETS = "application/octet-stream"


def _segments(request: Request, skip: int) -> list[str]:
    raw = request.scope.get("raw_path") or request.url.path.encode()
    parts = raw.decode("latin-1").split("?", 1)[0].strip("/").split("/")
    return [unquote(p) for p in parts[skip:]]


def _reader(request: Request, line: str) -> Check | None:
    """A reader token whose lines hold LINE, unless reads are public. Returns the check of
    the commits an answer shows (a set's members' lines too), None when reads are public."""
    if request.app.state.hub.get("public_read"):
        return None
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    who = authenticate(
        request.app.state.repo, token.strip() if scheme.lower() == "bearer" else None
    )
    try:
        requires(Access.READER)(who)
        check_line(who, line)
    except Forbidden as exc:
        raise _refused(exc) from None
    return _shows(who, line)


def _shows(who: Identity, line: str) -> Check:
    def check(conn, ids: list[str]) -> None:
        try:
            check_commits(conn, who, ids, f"{line} on the Hub")
        except Forbidden as exc:
            raise _refused(exc) from None

    return check


def _refused(exc: Forbidden) -> HubMiss:
    # Typed: the client raises GatedRepoError with this message. An untyped 403 on a download
    # reads to it as a network failure ("check your connection").
    return HubMiss("GatedRepo", str(exc), status=403)


def _hf_main(request: Request) -> str | None:
    return request.app.state.hub.get("main")


# What may follow a repo id; a second segment of these names is taken as the action unless a
# line of the two segments' name exists.
ACTIONS = (
    "revision",
    "tree",
    "refs",
    "commits",
    "commit",
    "preupload",
    "tag",
    "discussions",
    "xet-read-token",
    "xet-write-token",
)


def _split_repo(request: Request, parts: list[str]) -> tuple[str, list[str]]:
    """(line, what follows) of PARTS: a repo id of two segments when the second is not an
    action, or when a line of that name exists."""
    if not parts or not parts[0]:
        raise HubMiss("RepoNotFound", "no repo named")
    if len(parts) >= 2:
        two = "/".join(parts[:2])
        if parts[1] not in ACTIONS:
            return two, parts[2:]
        if is_line_name(two):  # anything else is no line: not looked up
            with request.app.state.repo.db.read() as conn:
                if find_line(conn, two) is not None:
                    return two, parts[2:]
    return parts[0], parts[1:]


@router.get("/api/models/{rest:hubpath}")
def api_models(request: Request) -> Response:
    """Repo info (`/{repo}`, `/{repo}/revision/{rev}`), `/{repo}/tree/{rev}[/{path}]`,
    `/{repo}/refs`, `/{repo}/commits/{rev}`, the proposals (`/{repo}/discussions[/{n}]`) and
    the Xet token routes (refused: `hub_write.XET`)."""
    parts = _segments(request, 2)
    if parts in ([], [""]):  # `/api/models/`: the listing, as `/api/models`
        return hub_write.list_models(request)
    line, rest = _split_repo(request, parts)
    if rest and rest[0] in ("xet-read-token", "xet-write-token"):
        return hub_write.xet_token(request)
    check = _reader(request, line)
    repo, main = request.app.state.repo, _hf_main(request)
    if not rest or (rest[0] == "revision" and len(rest) == 2):
        rev = rest[1] if rest else "main"
        return JSONResponse(model_info(snapshot(repo, line, rev, main, check)))
    if rest == ["refs"]:
        prs = request.query_params.get("include_prs", "") in ("1", "true")
        return JSONResponse(refs_of(repo, line, main, check, prs))
    if rest[0] == "tree" and len(rest) >= 2:
        snap = snapshot(repo, line, rest[1], main, check)
        return _tree_page(request, snap, "/".join(rest[2:]))
    if rest[0] == "commits" and len(rest) == 2:
        walked = commits_of(repo, line, rest[1], main, check, _cursor(request) + PAGE + 1)
        return _page(request, walked)
    if rest[0] == "discussions":
        return hub_proposals.read(request, line, rest[1:])
    raise HubMiss("EntryNotFound", f"no such route under {line}")


@router.post("/api/models/{rest:hubpath}")
async def api_models_post(request: Request) -> Response:
    """`/{repo}/preupload/{rev}`, `/{repo}/commit/{rev}`, `/{repo}/tag/{rev}` and the
    proposals' `/{repo}/discussions/{n}/(merge|status|comment)`."""
    line, rest = _split_repo(request, _segments(request, 2))
    if len(rest) == 2 and rest[0] == "commit":
        return await hub_write.commit(request, line, rest[1])
    if rest and rest[0] == "discussions":
        return await hub_proposals.write(request, line, rest[1:])
    if len(rest) == 2 and rest[0] in ("preupload", "tag"):
        body = await hub_write.read_json(request)
        if rest[0] == "preupload":
            return hub_write.preupload(request, line, rest[1], body)
        return hub_write.tag_create(request, line, rest[1], body)
    raise HubMiss("EntryNotFound", f"no such route under {line}", status=404)


@router.delete("/api/models/{rest:hubpath}")
def api_models_delete(request: Request) -> Response:
    """`/{repo}/tag/{tag}` (delete_tag)."""
    line, rest = _split_repo(request, _segments(request, 2))
    if len(rest) == 2 and rest[0] == "tag":
        return hub_write.tag_delete(request, line, rest[1])
    raise HubMiss("EntryNotFound", f"no such route under {line}", status=404)


def _tree_page(request: Request, snap: Snapshot, folder: str) -> Response:
    recursive = request.query_params.get("recursive", "").lower() in ("1", "true")
    return _page(request, tree_items(snap, folder, recursive))


def _cursor(request: Request) -> int:
    """The offset a listing's page starts at (`?cursor=`, as the Hub's Link sends it)."""
    cursor = request.query_params.get("cursor", "0") or "0"
    if not cursor.isdigit() or len(cursor) > 9:
        raise HTTPException(400, "the cursor is not a page offset")
    return int(cursor)


def _page(request: Request, items: list) -> Response:
    """One page of ITEMS from the query's cursor, with a `Link` to the next as the Hub's."""
    start = _cursor(request)
    page, headers = items[start : start + PAGE], {}
    if start + PAGE < len(items):
        # the path as the client sent it (percent-encoded), not decoded: a header is ASCII
        raw = (request.scope.get("raw_path") or b"").decode("latin-1") or request.url.path
        url = request.url.replace(path=quote(raw, safe="/%:@!$&'()*+,;=~")).include_query_params(
            cursor=str(start + PAGE)
        )
        headers["Link"] = f'<{url}>; rel="next"'
    return JSONResponse(page, headers=headers)


@router.api_route("/{a}/resolve/{rest:hubpath}", methods=["GET", "HEAD"])
def resolve_one(request: Request) -> Response:
    return _resolve(request, _segments(request, 0), 1)


@router.api_route("/{a}/{b}/resolve/{rest:hubpath}", methods=["GET", "HEAD"])
def resolve_two(request: Request) -> Response:
    return _resolve(request, _segments(request, 0), 2)


def _resolve(request: Request, parts: list[str], n: int) -> Response:
    """HEAD or GET one file of a revision: its metadata, and on GET its bytes (a `Range` gets
    206), or a 302 to a presigned URL for a large file of a store that makes them."""
    line, rest = "/".join(parts[:n]), parts[n + 1 :]
    check = _reader(request, line)
    if len(rest) < 2:
        raise HubMiss("EntryNotFound", "no file named")
    snap = snapshot(request.app.state.repo, line, rest[0], _hf_main(request), check)
    path = "/".join(rest[1:])
    f = snap.files.get(path)
    if f is None:
        raise HubMiss("EntryNotFound", f"{line} has no file {path!r} at {rest[0]}", snap.sha)
    headers = {
        "X-Repo-Commit": snap.sha,
        "ETag": f'"{f.sha256}"',
        "X-Linked-Etag": f'"{f.sha256}"',
        "X-Linked-Size": str(f.size),
        "Accept-Ranges": "bytes",
        "Content-Disposition": f"inline; filename*=UTF-8''{quote(path.rsplit('/', 1)[-1])}",
    }
    span = byte_range(request.headers.get("range"), f.size)
    if request.method == "HEAD":  # never a redirect: the client reads these headers here
        return Response(headers={**headers, "Content-Length": str(f.size)}, media_type=OCTETS)
    url = presigned(request, f.blob, f.size) if f.blob is not None else None
    if url is not None:  # the client follows it, without its token, and asks S3 for the range
        return redirect(url, {k: v for k, v in headers.items() if k.startswith(("X-", "ETag"))})
    if f.data is not None:
        return _generated(f, span, headers)
    try:  # checked against its id before a byte is sent (blob_send)
        return blob_body(request.app.state.repo.store, f.blob, f.size, span, headers, OCTETS)
    except BlobCorrupt as exc:  # not a typed miss: the client raises it with this message
        why = f"{exc}: the registry's copy is damaged, so it is not sent (run `mint fsck`)"
        raise HubMiss("BlobCorrupt", why, snap.sha, status=500) from None


def _generated(f: HubFile, span: tuple[int, int] | None, headers: dict) -> Response:
    """A file the checkout generates (a set's mol.toml, a prompt), whole or a range of it."""
    if span is None:
        return Response(f.data, media_type=OCTETS, headers=headers)
    start, end = span
    headers["Content-Range"] = f"bytes {start}-{end}/{f.size}"
    return Response(f.data[start : end + 1], status_code=206, media_type=OCTETS, headers=headers)


async def on_miss(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HubMiss)
    return miss_response(exc)


def install(app: FastAPI, hf_main: str | None = None, public_read: bool = False) -> None:
    """Serve the Hub's routes on APP (after its own, so /api/v1/ is matched first)."""
    app.state.hub = {"main": hf_main, "public_read": public_read}
    app.include_router(hub_write.router)
    app.include_router(hub_lfs.router)
    app.include_router(router)
    app.add_exception_handler(HubMiss, on_miss)
