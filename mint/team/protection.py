"""Protected channels: moving one (promote, rollback) needs a role, forcing one needs admin,
and approvals for it count only from identities other than the commit's author and pusher
(the gate's side of that is `mint.gates.checks.self_approvers`). A channel protected as
signed moves only with a signed statement by a trusted key (`mint.signing.moves`)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import sqlalchemy as sa

from mint import schema as s
from mint.errors import InvalidConfig, InvalidName, RevisionNotFound
from mint.ids import iso, utcnow
from mint.refs import check_name
from mint.repo import Repo
from mint.team.tokens import Access, parse_role

MOVE_ROLE = Access.WRITER  # an unprotected channel moves for writers


@dataclass(frozen=True)
class ProtectedChannel:
    channel: str
    role: Access
    created_at: str
    created_by: str
    signed: bool = False  # every move needs a signature by a trusted key
    keys: list[str] | None = None  # only these trusted keys (by name) sign its moves


def protect(
    repo: Repo,
    channel: str,
    role: str = "maintainer",
    *,
    by: str,
    signed: bool = False,
    keys: list[str] | None = None,
) -> ProtectedChannel:
    """Moving CHANNEL (on every line) now needs ROLE, and with SIGNED a signature by a trusted
    key (one of KEYS, by name, if given); protecting again changes all three."""
    check_name("channel", channel)
    access = parse_role(role)
    if not access.allows(MOVE_ROLE):
        raise InvalidName("role", role, f"moving a channel needs at least {MOVE_ROLE}")
    if keys and not signed:
        raise InvalidConfig("naming the keys a channel's moves take needs signed moves")
    names = sorted({check_name("key", k) for k in keys}) if keys else None
    with repo.db.write() as conn:
        for name in names or ():
            _check_trusted(conn, name)
        p = s.protected_channels.c
        conn.execute(s.protected_channels.delete().where(p.channel == channel))
        conn.execute(
            s.protected_channels.insert().values(
                channel=channel,
                role=access.value,
                created_at=utcnow(),
                created_by=by,
                signed=signed,
                signed_by=names,
            )
        )
        return _protected(_row(conn, channel))


def unprotect(repo: Repo, channel: str) -> ProtectedChannel | None:
    """CHANNEL moves for writers again. Returns what the protection was (None: there was none)."""
    with repo.db.write() as conn:
        row = _row(conn, channel)
        if row is not None:
            p = s.protected_channels.c
            conn.execute(s.protected_channels.delete().where(p.channel == channel))
        return _protected(row) if row is not None else None


def protected_ls(repo: Repo) -> list[ProtectedChannel]:
    with repo.db.read() as conn:
        rows = conn.execute(
            sa.select(s.protected_channels).order_by(s.protected_channels.c.channel)
        )
        return [_protected(r) for r in rows]


def move_role(conn, channel: str) -> Access:
    """The role that moving CHANNEL needs."""
    row = _row(conn, channel)
    return Access(row.role) if row is not None else MOVE_ROLE


def is_protected(conn, channel: str) -> bool:
    return _row(conn, channel) is not None


def needs_signature(conn, channel: str) -> bool:
    """Whether moves of CHANNEL need a signed statement (one lookup by primary key)."""
    p = s.protected_channels.c
    return bool(conn.execute(sa.select(p.signed).where(p.channel == channel)).scalar())


def signature_keys(conn, channel: str) -> list[str] | None:
    """The names of the keys whose signatures a signed CHANNEL's moves take; None: any
    trusted key that may sign its moves."""
    p = s.protected_channels.c
    return conn.execute(sa.select(p.signed_by).where(p.channel == channel)).scalar()


def _row(conn, channel: str):
    p = s.protected_channels.c
    return conn.execute(sa.select(s.protected_channels).where(p.channel == channel)).first()


def _check_trusted(conn, name: str) -> None:
    """NAME is a trusted key's (a typo would make a channel no signature can move)."""
    names = list(conn.execute(sa.select(s.signing_keys.c.name)).scalars())
    if name not in names:
        near = difflib.get_close_matches(name, names, n=3)
        raise RevisionNotFound(name, "no trusted key named", near)


def _protected(r) -> ProtectedChannel:
    return ProtectedChannel(
        r.channel, Access(r.role), iso(r.created_at), r.created_by, bool(r.signed), r.signed_by
    )
