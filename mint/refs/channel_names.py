"""Names that look like channels. `LINE@NAME` must mean one thing: a tag may not take the name
of a channel on its line, of a protected channel, or of a contract's channel (else the tag
would answer for a gated channel that does not exist yet), and a channel may not take a
tag's. A promote that would create a channel a couple of edits away from one the line has,
or from one a contract or a protection names (`prodution`), is refused unless the caller
says it means a new channel: a typo would otherwise make a channel silently.

Every door that makes a tag (the CLI, the registry's tag route, a push, a fetch, a Hub
pull) goes through `mint.refs.tags.tag_in`, which calls `check_tag_name`; every promote
calls `check_channel_name` and, when it creates the channel, `check_new_channel`.
"""

from __future__ import annotations

import sqlalchemy as sa

from mint import schema as s
from mint.errors import ChannelTypo, ReservedName
from mint.ids import RefKind

NEAR = 2  # edits within which a new channel's name is taken for a typo of a known one


def line_channels(conn, line: str) -> set[str]:
    """The channels LINE has."""
    r = s.refs.c
    q = sa.select(r.name).where(r.line == line, r.kind == RefKind.CHANNEL)
    return set(conn.execute(q).scalars())


def guard_of(conn, channel: str) -> str | None:
    """Why CHANNEL is guarded on every line (protected, or a contract's channel), or None."""
    p = s.protected_channels.c
    if conn.execute(sa.select(p.channel).where(p.channel == channel)).first() is not None:
        return f"channel {channel} is protected"
    c = s.contracts.c
    name = conn.execute(sa.select(c.name).where(c.channel == channel).limit(1)).scalar()
    if name is not None:
        return f"contract {name} guards channel {channel}"
    return None


def guarded_channels(conn) -> set[str]:
    """Every channel name a protection or a contract names."""
    protected = conn.execute(sa.select(s.protected_channels.c.channel)).scalars()
    contracts = conn.execute(sa.select(s.contracts.c.channel).distinct()).scalars()
    return {*protected, *contracts}


def check_tag_name(conn, line: str, name: str) -> None:
    """Refuse a tag LINE@NAME whose name is a channel's (ReservedName)."""
    ref = f"{line}@{name}"
    if name in line_channels(conn, line):
        raise ReservedName(ref, "tag", f"{ref} is a channel")
    why = guard_of(conn, name)
    if why is not None:
        raise ReservedName(ref, "tag", why)


def check_channel_name(conn, line: str, name: str) -> None:
    """Refuse a channel LINE@NAME whose name is a tag's (ReservedName)."""
    r = s.refs.c
    q = sa.select(r.kind).where(r.line == line, r.name == name)
    check_channel_kind(line, name, conn.execute(q).scalar())


def check_channel_kind(line: str, name: str, kind: str | None) -> None:
    """`check_channel_name` for a caller that has read the ref LINE@NAME already (its KIND,
    None if there is none)."""
    if kind is not None and kind != RefKind.CHANNEL:
        raise ReservedName(f"{line}@{name}", "channel", f"{line}@{name} is a tag")


def check_new_channel(conn, line: str, name: str) -> None:
    """Refuse to create LINE@NAME when its name is a typo's distance from a known channel
    (ChannelTypo, naming the nearest); a name far from every known one passes."""
    known = line_channels(conn, line) | guarded_channels(conn)
    if name in known:
        return
    near = sorted((edits(name, k), k) for k in known if is_near(name, k))
    if near:
        raise ChannelTypo(f"{line}@{name}", [k for _, k in near])


def is_near(name: str, known: str) -> bool:
    """Within NEAR edits, and fewer edits than the known name has characters (every name is
    within two edits of `qa`, so a short name counts as near only what differs in less)."""
    return edits(name, known) <= min(NEAR, len(known) - 1)


def edits(a: str, b: str) -> int:
    """The optimal-string-alignment distance: insertions, deletions, substitutions and
    swaps of two adjacent characters (`prodcution`), each one edit."""
    if abs(len(a) - len(b)) > NEAR:
        return abs(len(a) - len(b))  # more than NEAR apart already; the exact figure is moot
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        row = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                row[j] = min(row[j], prev2[j - 2] + 1)
        prev2, prev = prev, row
    return prev[-1]
