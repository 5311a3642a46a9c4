"""Names and revisions: one resolver for every revision form.

Revision syntax: LINE, LINE@TAG, LINE@CHANNEL, LINE@REMOTE/NAME (a remote's tag or channel
as last fetched), LINE@HEXPREFIX, REV~N, a full id or a unique hex prefix of 7 or more
characters. A LINE may be NAMESPACE/NAME. LINE@NAME is the line's own tag or channel NAME, else
the remote-tracking REMOTE/NAME of the one remote that has it (`mint.refs.remote_refs`).
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mint import schema as s
from mint.errors import AmbiguousRevision, InvalidName, RevisionNotFound
from mint.ids import CommitId, RefKind
from mint.refs import remote_refs
from mint.refs.remote_refs import RemoteRef

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_HEX = re.compile(r"^[0-9a-f]{7,64}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_REV = re.compile(r"^(?P<base>[^~]+)(?P<tilde>(?:~\d*)*)$")


NAMESPACED = ("line", "set")  # kinds whose names may be NAMESPACE/NAME
MAX_NAME = 100
SUGGESTIONS = 3  # known names a "did you mean" offers at most
READ_ONLY_REMOTE = ("tag", "channel")  # kinds whose REMOTE/NAME is a remote-tracking ref
REMOTE_READ_ONLY = (
    "REMOTE/NAME is a remote's tag or channel as the last fetch saw it, read-only here: "
    "only a fetch moves it; change it on the registry"
)


def check_name(kind: str, name: str) -> str:
    """Line, tag and channel names: letters, digits, '.', '_' and '-', no '..'. A line (or a
    set's) name may be NAMESPACE/NAME: one slash between two such names."""
    if not isinstance(name, str) or not name:
        raise InvalidName(kind, str(name), "it is empty")
    if name.count("/") == 1 and (kind in NAMESPACED or kind in READ_ONLY_REMOTE):
        if len(name) > MAX_NAME:
            raise InvalidName(kind, name, f"it is longer than {MAX_NAME} characters")
        for part in name.split("/"):
            _check_part(kind, name, part)
        if kind in READ_ONLY_REMOTE:
            raise InvalidName(kind, name, REMOTE_READ_ONLY)
        return name
    return _check_part(kind, name, name)


def check_local_ref(kind: str, name: str) -> None:
    """Refuse NAME, of a tag or channel to change, when it is a remote-tracking REMOTE/NAME."""
    if isinstance(name, str) and name.count("/") == 1:
        check_name(kind, name)


def _check_part(kind: str, name: str, part: str) -> str:
    if not _NAME.match(part):
        spaced = " or NAMESPACE/NAME" if kind in NAMESPACED else ""
        raise InvalidName(
            kind,
            name,
            f"use letters, digits, '.', '_' and '-'{spaced} (no other '/', no '@', '~', "
            "spaces or control characters)",
        )
    if ".." in part or part.endswith((".", ".lock")):
        raise InvalidName(kind, name, "it may not contain '..' or end with '.' or '.lock'")
    return name


def check_text(what: str, value: str | None) -> str | None:
    """Free text that is stored (messages, reasons): any characters but NUL, which
    PostgreSQL's text columns cannot hold."""
    if value is not None and "\x00" in value:
        raise InvalidName(what, value.replace("\x00", "\\0"), "it contains a NUL character")
    return value


def is_hex_prefix(text: str) -> bool:
    return bool(_HEX.match(text))


@dataclass(frozen=True)
class Resolved:
    id: CommitId
    line: str | None  # the line named in the revision, if any
    ref: str | None  # the tag or channel named, if any
    ref_kind: RefKind | None
    remote: str | None = None  # the remote whose tag or channel as last fetched it names


def _remote_ref(conn: Connection, line: str, name: str, rev: str) -> RemoteRef | None:
    """The remote-tracking ref LINE@NAME names (REMOTE/NAME, or NAME on the one remote that has
    it), or None; NAME on remotes that disagree is refused, naming each."""
    found = remote_refs.named(conn, line, name)
    if len({r.target for r in found}) > 1:
        raise RevisionNotFound(
            rev, f"remotes disagree on {name!r}: name one", [r.ref for r in found][:SUGGESTIONS]
        )
    return found[0] if found else None


def resolve(conn: Connection, rev: str) -> Resolved:
    """Resolve any revision form to one commit id, or raise RevisionNotFound/AmbiguousRevision."""
    m = _REV.match(rev.strip()) if isinstance(rev, str) and not _CONTROL.search(rev) else None
    if not m:
        raise RevisionNotFound(str(rev), "malformed revision")
    resolved = _resolve_base(conn, m.group("base"), rev, m.group("tilde"))
    steps = sum(int(t) if t else 1 for t in m.group("tilde").split("~")[1:])
    commit = resolved.id
    for taken in range(steps):
        parent = conn.execute(_first_parent(), {"cid": commit}).scalar()
        if parent is None:
            raise RevisionNotFound(rev, _past_the_first(m.group("base"), taken, commit))
        commit = parent
    return Resolved(
        CommitId(commit),
        resolved.line,
        resolved.ref if not steps else None,
        resolved.ref_kind if not steps else None,
    )


def _past_the_first(base: str, taken: int, first: str) -> str:
    """Why BASE~N names nothing when, TAKEN steps back, FIRST has no parent."""
    n = taken + 1
    commits = f"{n} commit{'' if n == 1 else 's'}"
    oldest = f"{base}~{taken}" if taken else base
    return f"the history of {base} has {commits} ({oldest} is the first, {first[:12]})"


@functools.cache
def _first_parent():
    """The first parent of the commit :cid: built once (LINE~10 takes ten)."""
    cp = s.commit_parents.c
    return sa.select(cp.parent_id).where(cp.commit_id == sa.bindparam("cid"), cp.idx == 0)


@functools.cache
def _ref_target():
    """LINE@NAME's target and kind: built once (issue 24, as rows._commit_by_id)."""
    r = s.refs.c
    return sa.select(r.target, r.kind).where(
        r.line == sa.bindparam("line"), r.name == sa.bindparam("name")
    )


def _resolve_base(conn: Connection, base: str, rev: str, tilde: str = "") -> Resolved:
    """BASE (REV without its ~N steps, TILDE) as a commit; a miss names the nearest known
    revisions, each with TILDE, as REV would be written."""
    if "@" in base:
        line, _, name = base.partition("@")
        if not line or not name:
            raise RevisionNotFound(rev, "malformed revision")
        row = conn.execute(_ref_target(), {"line": line, "name": name}).first()
        if row:
            return Resolved(CommitId(row.target), line, name, row.kind)
        tracking = _remote_ref(conn, line, name, rev)
        if tracking is not None:
            return Resolved(tracking.target, line, name, tracking.kind, tracking.remote)
        if is_hex_prefix(name):
            return Resolved(_by_prefix(conn, name, rev, line=line), line, None, None)
        near = [n + tilde for n in near_refs(conn, line, name)]
        if find_line(conn, line) is None:
            raise RevisionNotFound(rev, "unknown line", near)
        raise RevisionNotFound(rev, f"line {line} has no tag or channel {name!r}", near)
    row = find_line(conn, base)
    if row is not None:
        if row.head is None:
            raise RevisionNotFound(rev, "line has no commits")
        return Resolved(CommitId(row.head), base, None, None)
    if is_hex_prefix(base):
        return Resolved(_by_prefix(conn, base, rev), None, None, None)
    raise RevisionNotFound(rev, near=[n + tilde for n in near_lines(conn, base)])


# --- did you mean ------------------------------------------------------------------


def nearest(word: str, known: Iterable[str]) -> list[str]:
    """The names of KNOWN closest to WORD (difflib's ratio of 0.6 or more), closest first."""
    return difflib.get_close_matches(word, list(known), n=SUGGESTIONS)


def near_lines(conn: Connection, name: str) -> list[str]:
    """What an unknown LINE may have meant: the nearest line names, then LINE@NAME for the
    lines with a tag or channel called NAME (`production` for `chat@production`), here or
    as a remote's (remote-tracking)."""
    lines = []
    for table in (s.refs, s.remote_refs):
        q = sa.select(table.c.line).where(table.c.name == name).order_by(table.c.line)
        lines += conn.execute(q.distinct().limit(SUGGESTIONS)).scalars()
    refs = [f"{line}@{name}" for line in dict.fromkeys(lines)]
    return (_line_names(conn, name) + refs)[:SUGGESTIONS]


def near_refs(conn: Connection, line: str, name: str, kind: RefKind | None = None) -> list[str]:
    """What an unknown LINE@NAME may have meant, as LINE@NAME: the tags and channels (of
    KIND, if given) of LINE nearest to NAME; when there is no line LINE, NAME (or the
    nearest to it) on each of the lines nearest to LINE."""
    if find_line(conn, line) is not None:
        names = _ref_names(conn, line, kind)
        if kind is None:  # a revision may also name a remote-tracking ref
            names += remote_refs.names_of(conn, line)
        return [f"{line}@{n}" for n in nearest(name, names)]
    near = []
    for other in _line_names(conn, line):
        names = _ref_names(conn, other, kind)
        near += [f"{other}@{n}" for n in ([name] if name in names else nearest(name, names))]
    return near[:SUGGESTIONS]


def _line_names(conn: Connection, name: str) -> list[str]:
    return nearest(name, conn.execute(sa.select(s.lines.c.name)).scalars())


def _ref_names(conn: Connection, line: str, kind: RefKind | None) -> list[str]:
    q = sa.select(s.refs.c.name).where(s.refs.c.line == line)
    if kind is not None:
        q = q.where(s.refs.c.kind == kind)
    return list(conn.execute(q.order_by(s.refs.c.name)).scalars())


def _by_prefix(conn: Connection, prefix: str, rev: str, line: str | None = None) -> CommitId:
    # A range on the primary key, so the lookup is one index probe in both databases.
    q = sa.select(s.commits.c.id).where(s.commits.c.id >= prefix, s.commits.c.id < prefix + "g")
    if line is not None:
        q = q.where(s.commits.c.line == line)
    ids = [r[0] for r in conn.execute(q.order_by(s.commits.c.id).limit(5))]
    if not ids:
        raise RevisionNotFound(rev)
    if len(ids) > 1:
        raise AmbiguousRevision(rev, ids)
    return CommitId(ids[0])


def find_line(conn: Connection, name: str):
    """The line's row (name, kind, head, commit_count), or None."""
    return conn.execute(_line_named(), {"name": name}).first()


@functools.cache
def _line_named():
    return sa.select(s.lines).where(s.lines.c.name == sa.bindparam("name"))


def line_of(conn: Connection, commit_id: str) -> str:
    """The line the commit COMMIT_ID is on (RevisionNotFound when there is no such commit)."""
    q = sa.select(s.commits.c.line).where(s.commits.c.id == commit_id)
    line = conn.execute(q).scalar()
    if line is None:
        raise RevisionNotFound(commit_id, "no such commit")
    return line
