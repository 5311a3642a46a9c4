"""The Hub's write side on a registry (issue 37): what `HfApi().upload_folder`,
`PeftModel.push_to_hub` and `Trainer.push_to_hub` send, translated onto mint's operations.

- `POST /api/repos/create`: a line's name and the right to write it checked; the line is made
  without a commit (reads of its files answer EntryNotFound until its first); 409 when it
  exists (`exist_ok` takes that).
- `POST /api/models/{repo}/preupload/{rev}`: which files go inline ("regular", small ones) and
  which by the LFS batch API (`hub_lfs`), with the oid of the file the line's head holds.
- `POST /api/models/{repo}/commit/{rev}`: the NDJSON commit (`hub_commit`): `mint commit` of
  the folder it makes, `parentCommit` a compare-and-swap; `?create_pr=1` makes a proposal.
- `POST|DELETE /api/models/{repo}/tag/{rev|tag}`: mint tags (immutable: a tag elsewhere is 409).
- `GET /api/models/{repo}/commits/{rev}`, `GET /api/models` (the token's lines, `search`,
  `author`, `limit`), `GET /api/whoami-v2`, `POST /api/validate-yaml`.
- `GET /api/models/{repo}/xet-(read|write)-token/{rev}`: mint does not speak Xet; the answer
  says to set HF_HUB_DISABLE_XET=1.

A refusal is a 4xx whose JSON `error` (and `X-Error-Message`) is one line: what was wrong and
what to do, which huggingface_hub puts in the exception it raises.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
from urllib.parse import quote

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, RedirectResponse, Response

from mint import api
from mint import errors as e
from mint.commits import rows
from mint.commits.adapter import MAX_FILES, safe_relpath
from mint.ids import Kind
from mint.refs import RefsContainer, check_name
from mint.registry.auth import check_line, need, token_cache
from mint.registry.failures import status_of
from mint.registry.hf_protocol import SHOWN, HubMiss, revision_of
from mint.registry.hub_commit import MAX_INLINE, commit_upload, parse_body
from mint.store import StoreError
from mint.team.tokens import Access, Identity

router = APIRouter(include_in_schema=False)
XET = (
    "mint registries do not speak Xet: set HF_HUB_DISABLE_XET=1, and huggingface_hub uploads "
    "through the LFS API"
)
PAGE = 100  # commits or repos a page

# What a Hub user does about each refusal (the CLI's hints name CLI flags; these do not).
_FIXES: dict[type, str] = {
    e.PickleRefused: "save the adapter with safetensors (save_pretrained(dir, "
    "safe_serialization=True))",
    e.NotAnAdapter: "upload a PEFT adapter folder: adapter_config.json and "
    "adapter_model.safetensors (model.save_pretrained(dir))",
    e.InvalidAdapter: "upload the folder PEFT's save_pretrained writes, for a registered base",
    e.UnknownBase: "ask an admin to register the base (mint base add NAME PATH)",
    e.UnsafePath: "use paths relative to the repo's root, without '..'",
    e.RefConflict: "the line moved: read its head again (list_repo_commits) and commit on it",
    e.TagExists: "a mint tag never moves: choose another name",
    e.ProposalStale: "propose again on the line's head",
    e.MissingObjects: "upload the file's bytes first (preupload_lfs_files, or commit again)",
    e.Forbidden: "ask an admin for a token with that role and line (mint registry token create)",
    e.Unauthenticated: "pass a token of this registry (HF_TOKEN, or token=)",
}


def refusal(exc: BaseException) -> HubMiss:
    """EXC as the Hub client reads an error: one line, with what to do about it."""
    fix = next((f for k, f in _FIXES.items() if isinstance(exc, k)), None)
    message = " ".join(str(exc).split())
    text = f"{message}; {fix}" if fix else message
    return HubMiss(type(exc).__name__, text, None, status_of(exc))


@contextlib.contextmanager
def hub_answers():
    """Answer mint's errors (and the store's) as the Hub client reads them."""
    try:
        yield
    except (e.MintError, StoreError) as exc:
        raise refusal(exc) from None


def hub_identity(request: Request) -> Identity:
    """The bearer token's identity, or a 401 the client shows."""
    header = request.headers.get("authorization", "")
    scheme, _, secret = header.partition(" ")
    with hub_answers():
        secret = secret.strip() if scheme.lower() == "bearer" else None
        return token_cache(request.app).identity(request.app.state.repo, secret)


def base_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def repo_url(request: Request, line: str) -> str:
    return f"{base_url(request)}/{quote(line, safe='/')}"


def may_write(who: Identity, line: str, propose: bool = False) -> None:
    """A writer of LINE, or (PROPOSE) a contributor of it: Forbidden otherwise. LINE is
    NAMESPACE/NAME: huggingface_hub parses no other repo id in what a write answers."""
    if "/" not in line:
        why = "huggingface_hub writes NAMESPACE/NAME repos only: name it team/" + line
        raise e.InvalidName("line", line, why)
    need(who, Access.CONTRIBUTOR if propose else Access.WRITER, f"write {line}")
    check_line(who, line)


# --- create_repo, whoami, validate-yaml ------------------------------------------------------


@router.post("/api/repos/create")
async def create_repo(request: Request) -> Response:
    body = await read_json(request)
    who = hub_identity(request)
    kind, name, org = body.get("type"), body.get("name"), body.get("organization")
    if kind not in (None, "model"):
        raise HubMiss("BadRequest", f"mint keeps model repos (adapters), not {kind}s", status=400)
    line = f"{org}/{name}" if isinstance(org, str) and org else name
    with hub_answers():
        check_name("line", line if isinstance(line, str) else "")
        may_write(who, line)
        with request.app.state.repo.db.write() as conn:
            made = RefsContainer(conn).create_line(line, Kind.ADAPTER)
    url = repo_url(request, line)
    if not made:  # the Hub's 409 names the repo's URL too: exist_ok reads it
        why = f"{line} exists already (create_repo(exist_ok=True) takes it)"
        headers = {"X-Error-Code": "RepoExists", "X-Error-Message": why}
        return JSONResponse({"error": why, "url": url}, status_code=409, headers=headers)
    return JSONResponse({"url": url, "name": line, "id": line})


@router.get("/api/whoami-v2")
def whoami(request: Request) -> Response:
    who = hub_identity(request)
    role = "write" if who.role.allows(Access.WRITER) else "read"
    token = {"displayName": who.name, "role": role}
    auth = {"type": "access_token", "accessToken": token}
    return JSONResponse({"type": "user", "name": who.name, "orgs": [], "auth": auth})


@router.post("/api/validate-yaml")
async def validate_yaml(request: Request) -> Response:
    """A card's metadata: mint reads only its model-index, leniently; nothing is refused."""
    await read_json(request)
    hub_identity(request)
    return JSONResponse({"errors": [], "warnings": []})


async def read_json(request: Request) -> dict:
    """The request's JSON object (a 400 the client shows, if it is not one)."""
    try:
        body = await request.json()
    except ValueError:
        raise HubMiss("BadRequest", "the body is not JSON", status=400) from None
    if not isinstance(body, dict):
        raise HubMiss("BadRequest", "the body is not a JSON object", status=400)
    return body


# --- preupload and commit ----------------------------------------------------------------------


def preupload(request: Request, line: str, rev: str, body: dict) -> Response:
    """Each file's upload mode, and the oid of the file of that path in the line's head."""
    who = hub_identity(request)
    propose = _create_pr(request)
    files = body.get("files")
    if not isinstance(files, list) or len(files) > MAX_FILES:
        why = f"preupload takes a list of at most {MAX_FILES} files"
        raise HubMiss("BadRequest", why, status=400)
    repo = request.app.state.repo
    with hub_answers():
        _main(rev, propose)
        may_write(who, line, propose)
        with repo.db.read() as conn:
            head = RefsContainer(conn).head(line)
            held = rows.files_of(conn, head) if head else {}
        answer = [_mode(repo, f, held) for f in files]
    return JSONResponse({"files": answer})


def _mode(repo, f, held: dict) -> dict:
    """One file's mode: inline when under MAX_INLINE bytes and not binary, else LFS; and the
    oid the client
    compares its own with (an unchanged file is left out of the commit): the blob's sha256 for
    an LFS file, git's sha1 of the bytes for an inline one."""
    if not isinstance(f, dict) or not isinstance(f.get("path"), str):
        raise e.InvalidObject("a preupload file is {path, sample, size}")
    path, size = safe_relpath(f["path"]), f.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise e.InvalidObject(f"{path}: its size is a whole number")
    lfs, have, oid = size >= MAX_INLINE or _binary(f.get("sample")), held.get(path), None
    if have is not None and lfs:
        oid = have.sha256
    elif have is not None and have.size < MAX_INLINE:
        with repo.store.open(have.sha256) as blob:
            data = blob.read(MAX_INLINE)
        oid = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    mode = "lfs" if lfs else "regular"
    return {"path": path, "uploadMode": mode, "shouldIgnore": False, "oid": oid}


def _binary(sample: object) -> bool:
    """Whether a file's first bytes (base64) look binary, as the Hub tells (a NUL among them):
    weights go by LFS, whatever their size."""
    try:
        return isinstance(sample, str) and b"\0" in base64.b64decode(sample, validate=True)
    except ValueError:
        raise e.InvalidObject("a preupload file's sample is base64") from None


def _create_pr(request: Request) -> bool:
    return request.query_params.get("create_pr", "").lower() in ("1", "true")


def _main(rev: str, propose: bool) -> None:
    """Commits go to a line's head, `main`: a channel moves only by promote."""
    if rev != "main":
        what = "a proposal is made against main" if propose else "commit to main"
        why = f"{what}: channels and tags move by promote and tag, not by commits"
        raise e.InvalidName("revision", rev, why)


async def commit(request: Request, line: str, rev: str) -> Response:
    """`create_commit`'s NDJSON body, committed as `mint commit` commits a folder."""
    who = hub_identity(request)
    propose = _create_pr(request)
    raw = await request.body()
    with hub_answers():
        _main(rev, propose)
        may_write(who, line, propose)
        up = parse_body(raw)
        work = functools.partial(
            commit_upload, request.app.state.repo, who, line, up, propose=propose
        )
        result = await run_in_threadpool(work)
    sha, url = result.id[:SHOWN], repo_url(request, line)
    answer = {"commitUrl": f"{url}/commit/{sha}", "commitOid": sha}
    if result.proposal is not None:
        answer["pullRequestUrl"] = f"{url}/discussions/{result.proposal}"
    return JSONResponse(answer)


# --- tags, commits, models, xet ------------------------------------------------------------------


def tag_create(request: Request, line: str, rev: str, body: dict) -> Response:
    """`create_tag`: LINE@TAG at what REV names (a mint tag: it never moves)."""
    who = hub_identity(request)
    tag, message = body.get("tag"), body.get("message")
    repo, main = request.app.state.repo, request.app.state.hub.get("main")
    with hub_answers():
        may_write(who, line)
        if not isinstance(tag, str) or (message is not None and not isinstance(message, str)):
            raise e.InvalidObject("a tag is {tag, message?}")
        with repo.db.read() as conn:
            target = revision_of(conn, line, rev, main)
        api.tag(repo, f"{line}@{tag}", target, by=who.name, message=message)
    return JSONResponse({})


def tag_delete(request: Request, line: str, tag: str) -> Response:
    """`delete_tag` (a maintainer's, as `mint tag --delete` on a registry)."""
    who = hub_identity(request)
    with hub_answers():
        check_line(who, line)
        need(who, Access.MAINTAINER, f"delete tag {line}@{tag}")
        api.tag_delete(request.app.state.repo, f"{line}@{tag}", by=who.name)
    return JSONResponse({})


@router.get("/api/models")
def list_models(request: Request) -> Response:
    """The lines the token may read, as model repos: `search` (in the name), `author` (the
    namespace), `limit`; pages of at most PAGE, the next one linked by its `cursor`."""
    who = _list_reader(request)
    q = request.query_params
    search, author = (q.get("search") or "").lower(), q.get("author") or ""
    limit = q.get("limit") or str(PAGE)
    if not limit.isdigit() or int(limit) < 1:
        raise HubMiss("BadRequest", "limit is a whole number above 0", status=400)
    size, cursor = min(int(limit), PAGE), q.get("cursor") or None

    def wanted(info) -> bool:
        return (
            info.head is not None
            and search in info.name.lower()
            and (not author or info.name.startswith(f"{author}/"))
            and (who is None or who.may_touch(info.name))
        )

    found: list = []
    with hub_answers():
        while len(found) < size:
            page = api.ls(request.app.state.repo, limit=PAGE * 5, after=cursor)
            found += [i for i in page if wanted(i)]
            if len(page) < PAGE * 5:
                break
            cursor = page[-1].name
    found = found[:size]
    headers = {}
    if len(found) == size:
        after = request.url.include_query_params(cursor=found[-1].name)
        headers["Link"] = f'<{after}>; rel="next"'
    return JSONResponse([_model_item(i) for i in found], headers=headers)


def _list_reader(request: Request) -> Identity | None:
    """The reader listing (None: reads are public and no token was sent)."""
    if request.app.state.hub.get("public_read") and not request.headers.get("authorization"):
        return None
    who = hub_identity(request)
    with hub_answers():
        need(who, Access.READER, "list models")
    return who


def _model_item(info) -> dict:
    sha = info.head[:SHOWN]
    return {
        "_id": sha,
        "id": info.name,
        "modelId": info.name,
        "sha": sha,
        "private": False,
        "tags": [str(info.kind)],
    }


XET_PATH = "/api/xet-unsupported/set-HF_HUB_DISABLE_XET=1-then-upload-again"


def xet_token(request: Request) -> Response:
    """What huggingface_hub asks for first when hf_xet is installed: mint has no Xet. hf_xet
    shows the URL of a refusal, not its words, so the refusal is made at a URL that says what
    to do (a redirect there); any other client reads the same words in the answer."""
    if request.url.path != XET_PATH:
        return RedirectResponse(XET_PATH, status_code=307, headers={"X-Error-Message": XET})
    raise HubMiss("XetUnsupported", XET, status=400)


@router.get(XET_PATH)
def xet_unsupported(request: Request) -> Response:
    return xet_token(request)
