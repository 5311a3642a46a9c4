"""Bearer tokens: an identity with a role, optionally limited to lines by globs.

Only the sha256 of a token is stored; a presented token is hashed and compared in constant
time. A revoked token stays in the table, so that its name (the identity history records)
is never given to another token.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from enum import StrEnum

import sqlalchemy as sa

from mint import schema as s
from mint.db import is_unique_violation
from mint.errors import InvalidName, TokenExists, Unauthenticated, UnknownToken
from mint.ids import iso, utcnow
from mint.refs import check_name
from mint.repo import Repo
from mint.team.revocation import announce

PREFIX = "mint_"
# A line glob takes the line names' own characters, `/` included (a namespace: `team-a/*`).
_GLOB = re.compile(r"^[A-Za-z0-9._\-*?\[\]!/]{1,100}$")
_RANK = {"reader": 0, "contributor": 1, "writer": 2, "maintainer": 3, "admin": 4}


class Access(StrEnum):
    """A token's role; each includes the ones before it."""

    READER = "reader"
    CONTRIBUTOR = "contributor"  # reads, and proposes commits to its lines (refs/pr/N)
    WRITER = "writer"
    MAINTAINER = "maintainer"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return _RANK[self.value]

    def allows(self, needed: Access) -> bool:
        return self.rank >= needed.rank


@dataclass(frozen=True)
class Identity:
    """Who a request acts as: the token's name, role and line globs (None: every line)."""

    name: str
    role: Access
    lines: list[str] | None

    def may_touch(self, line: str) -> bool:
        """Whether LINE matches one of the token's globs (always, without globs)."""
        return self.lines is None or matches(line, self.lines)


@dataclass(frozen=True)
class TokenInfo:
    name: str
    role: Access
    lines: list[str] | None
    created_at: str
    created_by: str
    revoked_at: str | None


@dataclass(frozen=True)
class NewToken:
    """A token just made: `token` is the secret, shown this once and stored only hashed."""

    name: str
    role: Access
    lines: list[str] | None
    token: str


def token_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def parse_role(role: str) -> Access:
    try:
        return Access(role)
    except ValueError:
        raise InvalidName("role", str(role), f"use one of {', '.join(_RANK)}") from None


def matches(line: str, globs: list[str] | tuple[str, ...]) -> bool:
    """Whether LINE matches one of GLOBS (fnmatch, case-sensitive: `team-a/*` is a namespace)."""
    return any(fnmatch.fnmatchcase(line, g) for g in globs)


def check_globs(globs: list[str] | tuple[str, ...] | None) -> list[str] | None:
    """Line globs (fnmatch: '*', '?', '[...]') over line-name characters; None or empty: all."""
    if not globs:
        return None
    for g in globs:
        if not isinstance(g, str) or not _GLOB.match(g):
            raise InvalidName("line glob", str(g), "use line-name characters, / and * ? [ ] !")
    return sorted(set(globs))


def token_create(
    repo: Repo, name: str, role: str, lines: list[str] | None = None, *, by: str
) -> NewToken:
    """Make a token NAME with ROLE (and line globs); its secret is returned once."""
    check_name("token", name)
    access, globs = parse_role(role), check_globs(lines)
    secret = PREFIX + secrets.token_urlsafe(32)
    row = dict(
        name=name,
        hash=token_hash(secret),
        role=access.value,
        lines=globs,
        created_at=utcnow(),
        created_by=by,
        revoked_at=None,
    )
    with repo.db.write() as conn:
        if _row(conn, name) is not None:
            raise TokenExists(name)
        try:
            with conn.begin_nested():
                conn.execute(s.tokens.insert().values(**row))
        except sa.exc.IntegrityError as exc:
            if not is_unique_violation(exc):
                raise
            raise TokenExists(name) from None
    return NewToken(name, access, globs, secret)


def token_ls(repo: Repo) -> list[TokenInfo]:
    """Every token, revoked ones too (never their secrets)."""
    with repo.db.read() as conn:
        rows = conn.execute(sa.select(s.tokens).order_by(s.tokens.c.name))
        return [_info(r) for r in rows]


def token_revoke(repo: Repo, name: str) -> TokenInfo:
    """Revoke the token NAME at once, on every registry replica (`revocation.announce`);
    revoking a revoked token changes nothing."""
    with repo.db.write() as conn:
        if _row(conn, name) is None:
            raise UnknownToken(name)
        announce(conn)
        t = s.tokens.c
        conn.execute(
            s.tokens.update()
            .where(t.name == name, t.revoked_at.is_(None))
            .values(revoked_at=utcnow())
        )
        return _info(_row(conn, name))


def authenticate(repo: Repo, secret: str | None) -> Identity:
    """The identity of a presented bearer token, or Unauthenticated."""
    if not secret:
        raise Unauthenticated("a bearer token is required")
    digest = token_hash(secret)
    with repo.db.read() as conn:
        row = conn.execute(sa.select(s.tokens).where(s.tokens.c.hash == digest)).first()
    if row is None or not hmac.compare_digest(row.hash, digest) or row.revoked_at is not None:
        raise Unauthenticated("the token is unknown or revoked")
    return Identity(row.name, Access(row.role), row.lines)


def _row(conn, name: str):
    return conn.execute(sa.select(s.tokens).where(s.tokens.c.name == name)).first()


def _info(r) -> TokenInfo:
    return TokenInfo(
        r.name, Access(r.role), r.lines, iso(r.created_at), r.created_by, iso(r.revoked_at)
    )
