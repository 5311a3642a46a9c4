"""Protected channels: moving one (promote, rollback) needs a role, forcing one needs admin,
and approvals for it count only from identities other than the commit's author and pusher
(the gate's side of that is `mint.gates.checks.self_approvers`). A channel protected as
signed moves only with a signed statement by a trusted key (`mint.signing.moves`)."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from mint import schema as s
from mint.errors import InvalidName
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


def protect(
    repo: Repo, channel: str, role: str = "maintainer", *, by: str, signed: bool = False
) -> ProtectedChannel:
    """Moving CHANNEL (on every line) now needs ROLE, and with SIGNED a signature by a trusted
    key; protecting again changes both."""
    check_name("channel", channel)
    access = parse_role(role)
    if not access.allows(MOVE_ROLE):
        raise InvalidName("role", role, f"moving a channel needs at least {MOVE_ROLE}")
    with repo.db.write() as conn:
        p = s.protected_channels.c
        conn.execute(s.protected_channels.delete().where(p.channel == channel))
        conn.execute(
            s.protected_channels.insert().values(
                channel=channel,
                role=access.value,
                created_at=utcnow(),
                created_by=by,
                signed=signed,
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


def _row(conn, channel: str):
    p = s.protected_channels.c
    return conn.execute(sa.select(s.protected_channels).where(p.channel == channel)).first()


def _protected(r) -> ProtectedChannel:
    return ProtectedChannel(
        r.channel, Access(r.role), iso(r.created_at), r.created_by, bool(r.signed)
    )
