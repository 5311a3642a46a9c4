"""What each trusted key may sign (issue 35): key purposes.

A key is trusted for everything it is not limited from: its `purposes` (among commits, sets
and moves), its `lines` (globs of the lines whose commits and moves it may sign) and its
`channels` (the channels whose moves it may sign); each is null for no limit, as every key
added before purposes existed is. A CI key that signs `commit --sign` on a runner can thus be
kept from signing production's moves (`mint key limit ci --for commits`), and a channel
protected as signed can name the keys its moves take (`mint registry protect production
--signed --keys release`).

Storing a bundle ignores purposes: a bundle that names any trusted key must verify with it
(`mint.signing.stored`). What a key may sign is asked where a signature is counted: `mint
verify` and everything built on it (a gate's `[signature]`, `mint serve --require-signed`,
the vLLM plugin, signing a set over its members), and a signed move.
"""

from __future__ import annotations

import fnmatch

import sqlalchemy as sa

from mint import schema as s
from mint.errors import InvalidName
from mint.objects import SigningKey
from mint.refs.revisions import check_name

COMMITS, SETS, MOVES = "commits", "sets", "moves"
PURPOSES = (COMMITS, SETS, MOVES)


class Keys(dict):
    """fingerprint -> (name, public PEM) of the keys that count for one purpose, and
    `excluded`: fingerprint -> why a trusted key does not count there (in words)."""

    def __init__(self, found=(), excluded: dict[str, str] | None = None):
        super().__init__(found)
        self.excluded = excluded or {}


def check_purposes(purposes) -> list[str] | None:
    """PURPOSES (a list, or `commits,sets` text) checked, in PURPOSES' order; None: all."""
    if purposes is None:
        return None
    names = purposes.split(",") if isinstance(purposes, str) else list(purposes)
    names = {n.strip() for n in names if isinstance(n, str) and n.strip()} or {""}
    for n in names:
        if n not in PURPOSES:
            raise InvalidName("key purpose", n, f"use {', '.join(PURPOSES)}")
    return [p for p in PURPOSES if p in names]


def check_limits(purposes, lines, channels) -> dict:
    """The limits of a key as they are stored: purposes, line globs, channel names (each
    None for no limit)."""
    from mint.team.tokens import check_globs

    chans = sorted({check_name("channel", c) for c in channels}) if channels else None
    return {"purposes": check_purposes(purposes), "lines": check_globs(lines), "channels": chans}


def allows(row, purpose: str, line: str | None = None, channel: str | None = None) -> str | None:
    """None if the key of ROW (a signing_keys row or a `SigningKey`) may sign PURPOSE (on
    LINE, of CHANNEL); else why not, in words."""
    if row.purposes is not None and purpose not in row.purposes:
        return f"{row.name}, whose key signs only {', '.join(row.purposes)}"
    if line is not None and row.lines is not None:
        if not any(fnmatch.fnmatchcase(line, g) for g in row.lines):
            return f"{row.name}, whose key does not sign line {line}"
    if channel is not None and row.channels is not None and channel not in row.channels:
        return f"{row.name}, whose key does not sign moves of {channel}"
    return None


def keys_for(
    conn, purpose: str, *, line: str | None = None, channel: str | None = None, names=None
) -> Keys:
    """The trusted keys that may sign PURPOSE (on LINE, of CHANNEL; only those NAMES names,
    if given: a signed channel's keys)."""
    found, excluded = {}, {}
    for r in conn.execute(sa.select(s.signing_keys)):
        why = allows(r, purpose, line, channel)
        if why is None and names is not None and r.name not in names:
            why = f"{r.name}, whose key is not one {channel} takes ({', '.join(names)})"
        if why is None:
            found[r.fingerprint] = (r.name, r.public_pem.encode())
        else:
            excluded[r.fingerprint] = why
    return Keys(found, excluded)


def key_limit(repo, name: str, *, purposes=None, lines=None, channels=None) -> SigningKey:
    """Limit the trusted key NAME to PURPOSES, LINES (globs) and CHANNELS, replacing the
    limits it had (none given: it signs everything again)."""
    from mint.signing.keys import as_key, unknown_key

    limits = check_limits(purposes, lines, channels)
    k = s.signing_keys.c
    with repo.db.write() as conn:
        if conn.execute(sa.select(k.name).where(k.name == name)).first() is None:
            raise unknown_key(conn, name)
        conn.execute(s.signing_keys.update().where(k.name == name).values(**limits))
        return as_key(conn.execute(sa.select(s.signing_keys).where(k.name == name)).one())
