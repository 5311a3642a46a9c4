"""Who a request acts as, and what it may do: FastAPI dependencies over `tokens` and
`protection`. Routes declare the role they need (`Reader`, `Writer`, …) and check lines and
channel moves with the helpers here before calling the operation.

A token is checked once per request, and a good one is remembered (`TokenCache`, keyed by
the token's sha256, never the secret), so that a push's requests do not each read the tokens
table: for TOKEN_TTL seconds at most, and only while the replica's watch of its database
(`mint.registry.token_watch`) says nothing was revoked since it was read. A revoked token is
therefore refused on its next request by every replica, whichever door revoked it (the
repository's own CLI, this replica or another), and a replica that cannot watch believes no
token from memory (issue 35).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from typing import Annotated, TypeVar

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from mint.errors import Forbidden
from mint.registry import queries
from mint.repo import Repo
from mint.team.protection import is_protected, move_role
from mint.team.tokens import Access, Identity, authenticate, token_hash

T = TypeVar("T")

bearer = HTTPBearer(auto_error=False, description="A token made by `mint registry token create`.")


async def repo_of(request: Request) -> Repo:
    # async (as are `identity` and the role checks), so that FastAPI runs them on the event
    # loop: a sync dependency is a trip to the thread pool and back, each request's wait for
    # a CPU several times over on a loaded machine (issue 24)
    return request.app.state.repo


TOKEN_TTL = 5.0  # seconds a good token is believed without reading the tokens table
TOKEN_CACHE = 10_000  # tokens remembered at most (the least recently used go first)


class TokenCache:
    """Identities of tokens found good, by the sha256 of the token, for TTL seconds each and
    while WATCH's generation stays the one each was read under (`token_watch`); at most SIZE
    of them. Unknown and revoked tokens are never remembered."""

    def __init__(self, watch, ttl: float = TOKEN_TTL, size: int = TOKEN_CACHE):
        """WATCH: a `token_watch` watch, or a function of this cache that makes one."""
        self.watch = watch(self) if callable(watch) else watch
        self.ttl, self.size = ttl, size
        self._found: OrderedDict[str, tuple[int, float, Identity]] = OrderedDict()
        self._lock = threading.Lock()

    def fresh(self, secret: str | None) -> Identity | None:
        """SECRET's identity if it is remembered and fresh, else None (reads no table)."""
        if not secret:
            return None
        key, generation = token_hash(secret), self.watch.generation()
        with self._lock:
            found = self._found.get(key)
            if found is None or generation is None:
                return None
            if found[0] == generation and time.monotonic() - found[1] < self.ttl:
                self._found.move_to_end(key)
                return found[2]
            del self._found[key]
        return None

    def identity(self, repo: Repo, secret: str | None) -> Identity:
        """SECRET's identity (`tokens.authenticate`), from here while it is fresh."""
        who = self.fresh(secret)
        if who is not None or not secret:  # no secret: authenticate refuses it
            return who if who is not None else authenticate(repo, secret)
        # the generation first: a revocation committed while the table is read changes it
        key, generation, now = token_hash(secret), self.watch.generation(), time.monotonic()
        who = authenticate(repo, secret)
        if generation is None:  # not watching: nothing is believed from memory
            return who
        with self._lock:
            self._found[key] = (generation, now, who)
            self._found.move_to_end(key)
            while len(self._found) > self.size:
                self._found.popitem(last=False)
        return who

    def __len__(self) -> int:
        return len(self._found)

    def clear(self) -> None:
        """Forget every token (this process revoked one: it is refused from the next request)."""
        with self._lock:
            self._found.clear()


def token_cache(app) -> TokenCache:
    """The application's token cache, made on first use (or when the app starts: `install`),
    over a watch of its repository's database."""
    cache = getattr(app.state, "token_cache", None)
    if cache is None:
        from mint.registry.token_watch import watch_for

        with _made:
            cache = getattr(app.state, "token_cache", None)
            if cache is None:
                repo = app.state.repo
                cache = TokenCache(lambda owner: watch_for(repo, owner))
                app.state.token_cache = cache
    return cache


def install(app) -> None:
    """Watch for revocations while the app runs (its lifespan): from its start, so that the
    first requests already find it listening, and closed when it stops."""
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(application):
        cache = token_cache(application)
        try:
            async with inner(application) as state:
                yield state
        finally:
            cache.watch.close()
            application.state.token_cache = None

    app.router.lifespan_context = lifespan


_made = threading.Lock()


async def identity(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)
) -> Identity:
    """The token's identity; 401 without a token or with an unknown or revoked one. Checked
    once per request (FastAPI resolves a dependency once), through the `TokenCache`: a fresh
    one on the event loop, any other by a read of the tokens table in the thread pool."""
    secret = credentials.credentials if credentials else None
    cache = token_cache(request.app)
    who = cache.fresh(secret)
    if who is None:
        who = await run_in_threadpool(cache.identity, request.app.state.repo, secret)
    return who


def requires(role: Access) -> Callable[[Identity], Identity]:
    """The check that an identity has ROLE: returns it, or raises Forbidden."""

    def check(who: Identity) -> Identity:
        if not who.role.allows(role):
            raise Forbidden(
                who.name, f"do this: it needs the {role} role, the token is {who.role}"
            )
        return who

    return check


def _role(role: Access) -> Callable[..., Awaitable[Identity]]:
    """The dependency that checks ROLE (`requires`) on the request's identity."""
    check = requires(role)

    async def dependency(who: Identity = Depends(identity)) -> Identity:
        return check(who)

    dependency.__name__ = f"requires_{role}"
    return dependency


RepoDep = Annotated[Repo, Depends(repo_of)]
Reader = Annotated[Identity, Depends(_role(Access.READER))]
Contributor = Annotated[Identity, Depends(_role(Access.CONTRIBUTOR))]


async def _uploader(who: Identity = Depends(identity)) -> Identity:
    """Who may upload blobs: a writer, or a contributor (for a proposal's commit)."""
    why = "upload blobs: it needs the writer role (a contributor's, to propose)"
    need(who, Access.CONTRIBUTOR, why)
    return who


Uploader = Annotated[Identity, Depends(_uploader)]
Writer = Annotated[Identity, Depends(_role(Access.WRITER))]
Maintainer = Annotated[Identity, Depends(_role(Access.MAINTAINER))]
Admin = Annotated[Identity, Depends(_role(Access.ADMIN))]


def need(who: Identity, role: Access, why: str) -> None:
    if not who.role.allows(role):
        needs = "" if "needs the" in why else f": it needs the {role} role"
        raise Forbidden(who.name, f"{why}{needs}, the token is {who.role}")


def check_line(who: Identity, line: str) -> None:
    if not who.may_touch(line):
        raise Forbidden(who.name, f"touch line {line}: it is outside the token's lines")


def check_rev(repo: Repo, who: Identity, rev: str) -> str | None:
    """For a token limited to lines, REV's commit must be on one of them, and so must every
    commit it shows (`check_commit`). Returns the line when it was looked up."""
    if who.lines is None:
        return None
    with repo.db.read() as conn:  # one transaction for the commit and the lines it shows
        cid, line = queries.commit_of(conn, rev)
        check_line(who, line)
        check_commits(conn, who, [cid], f"commit {cid[:12]}")
    return line


def check_commit(repo: Repo, who: Identity, commit_id: str) -> None:
    """A token limited to lines reads a commit only if it may read every line the commit
    shows: its own, and for a set every member's, whose files its checkout holds. Without
    this a set on one of the token's lines would hand out any other line's weights."""
    if who.lines is None:
        return
    with repo.db.read() as conn:
        check_commits(conn, who, [commit_id], f"commit {commit_id[:12]}")


def check_commits(conn, who: Identity, ids: Iterable[str], what: str) -> None:
    """`check_commit` for each of IDS, in the caller's transaction (CONN), so the check and
    the answer see the same rows; WHAT names the read in the refusal."""
    if who.lines is None:
        return
    if any(not who.may_touch(line) for line in queries.shown_lines(conn, ids)):
        # the refusal names no outside line: the token may not learn which lines exist
        raise Forbidden(who.name, f"read {what}: it shows a line outside the token's lines")


def check_blob(repo: Repo, who: Identity, blob_id: str) -> None:
    """A token limited to lines reads a blob only if a commit of one of its lines holds it."""
    if who.lines is None:
        return
    if not any(who.may_touch(line) for line in queries.blob_lines(repo, blob_id)):
        raise Forbidden(who.name, f"read blob {blob_id[:12]}: no line of the token holds it")


FILL_STEP = 500  # lines of the catalog read at a time to fill a limited token's page


def visible(who: Identity, items: Iterable[T], line: Callable[[T], str]) -> list[T]:
    """The items on lines the token may read."""
    return [i for i in items if who.may_touch(line(i))]


def visible_page(
    who: Identity,
    read: Callable[[int | None, str | None], list[T]],
    limit: int | None,
    after: str | None,
    line: Callable[[T], str],
) -> list[T]:
    """A page of at most LIMIT items on lines the token may read, after the line AFTER.

    READ(limit, after) pages the whole catalog by line name. A token limited to lines gets
    its page filled from as many pages as it takes (of FILL_STEP lines or more): filtering
    one page of the catalog would answer short or empty pages while more of its lines
    follow, and a client stops paging at the first empty one."""
    if who.lines is None or limit is None:
        return visible(who, read(limit, after), line)
    found: list[T] = []
    step = max(limit, FILL_STEP)
    while len(found) < limit:
        page = read(step, after)
        found += visible(who, page, line)
        if len(page) < step:
            break
        after = line(page[-1])
    return found[:limit]


def check_move(repo: Repo, who: Identity, line: str, channel: str, *, force: bool) -> None:
    """Moving LINE@CHANNEL needs the channel's role (writer when unprotected); forcing a
    protected channel needs admin."""
    check_line(who, line)
    with repo.db.read() as conn:
        role, protected = move_role(conn, channel), is_protected(conn, channel)
    need(who, role, f"move {line}@{channel}")
    if force and protected:
        need(who, Access.ADMIN, f"force protected channel {channel}")
