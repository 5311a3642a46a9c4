"""A commit that arrives from another repository (a push, a fetch), from its wire form.

The fields are checked as strictly as the local commit commands make them: exact JSON
types (a size is an integer, never `"12"`, `12.0` or `1e400`), numbers bounded before any
arithmetic, names as `check_name` allows them, paths as a checkout writes them, and the
shape of each kind (an adapter has no members, a set no tensors). Then the id is recomputed
from the content and must be the one sent.
"""

from __future__ import annotations

from mint.commits.adapter import safe_relpath
from mint.commits.rows import NewCommit, build_commit
from mint.errors import InvalidConfig, InvalidName, InvalidObject, UnsafePath
from mint.exchange import received as r
from mint.exchange.wire import COMMIT_KEYS, MEMBER_FIELDS, TENSOR_FIELDS
from mint.ids import Kind, Role
from mint.objects import FileEntry, Member, TensorEntry
from mint.refs.revisions import MAX_NAME, check_name, check_text
from mint.sets.bound import check_bound

KEYS = COMMIT_KEYS  # single-sourced with the writer, mint.exchange.wire.commit_wire
MAX_TEXT = 32 * 1024 * 1024  # a message: what one request may carry
MAX_PATH = 1000  # the widths of the columns that keep them
MAX_IDENTITY = 200
MAX_DIMS = 64
MAX_DTYPE = 16
MAX_REQUESTED = 300


def new_commit(wire: object) -> NewCommit:
    """The commit WIRE describes, every field checked and its id recomputed and compared."""
    if not isinstance(wire, dict) or set(wire) != KEYS:
        got = sorted(wire) if isinstance(wire, dict) else r.shown(wire)
        raise InvalidObject(f"malformed commit object: its keys are {r.shown(got)}")
    kind = wire["kind"]
    if kind not in ("adapter", "set"):
        raise InvalidObject(f"commit kind is {r.shown(kind)}: adapter or set")
    files = _files(wire["files"])
    created = r.text(wire["created_at"], "created_at", max_len=64)
    r.timestamp(created, "created_at", not_after=None)
    c = build_commit(
        Kind(kind),
        check_name("line", r.text(wire["line"], "line", max_len=MAX_NAME, empty=False)),
        parents=[r.hex64(p, "a parent") for p in r.listing(wire["parents"], "parents")],
        files=files,
        base=r.optional_text(wire["base"], "base", max_len=MAX_IDENTITY),
        base_fingerprint=_optional_hex(wire["base_fingerprint"], "base_fingerprint"),
        message=check_text("message", r.text(wire["message"], "message", max_len=MAX_TEXT)),
        author=r.text(wire["author"], "author", max_len=MAX_IDENTITY),
        created_at=created,
        meta=r.table(wire["meta"], "meta"),
        provenance=r.table(wire["provenance"], "provenance"),
        peft=r.table(wire["peft"], "peft", optional=True),
        config=r.table(wire["config"], "config", optional=True),
        tensors=[_tensor(t, files) for t in r.listing(wire["tensors"], "tensors")],
        members=[_member(m) for m in r.listing(wire["members"], "members")],
    )
    _check_shape(c)
    if c.id != wire["id"]:
        raise InvalidObject(f"commit object {r.shown(wire['id'])} hashes to {c.id[:12]}")
    if c.kind == Kind.SET:
        _check_set(c)
    return c


def _check_set(c: NewCommit) -> None:
    """The id does not hash a set's config, which serving and checkout read: it must be what
    `mint set commit` writes for these members (mint.sets.bound, the local rules)."""
    if c.peft is not None:
        raise InvalidObject("a set commit has no peft table")
    try:
        check_bound(c.line, c.base, c.files, c.config, c.members)
    except (InvalidConfig, InvalidName, UnsafePath) as exc:
        raise InvalidObject(f"set commit {c.id[:12]}: {exc}") from None


def _files(value: object) -> dict[str, FileEntry]:
    if not isinstance(value, dict):
        raise InvalidObject(f"files is {r.shown(value)}: a JSON object of path: [sha256, size]")
    out = {}
    for path, entry in value.items():
        safe_relpath(r.text(path, "a file path", max_len=MAX_PATH, empty=False))
        if not (isinstance(entry, list) and len(entry) == 2):
            raise InvalidObject(f"file {r.shown(path)} is {r.shown(entry)}: [sha256, size]")
        out[path] = FileEntry(r.hex64(entry[0], f"{path}'s blob"), r.whole(entry[1], "a size"))
    return out


def _tensor(value: object, files: dict[str, FileEntry]) -> TensorEntry:
    if not (isinstance(value, list) and len(value) == len(TENSOR_FIELDS)):
        raise InvalidObject(f"tensor entry is {r.shown(value)}: [{', '.join(TENSOR_FIELDS)}]")
    name, dtype, shape, digest, nbytes, file, offset = value
    shape = r.listing(shape, "a tensor shape")
    if len(shape) > MAX_DIMS:
        raise InvalidObject(f"a tensor shape has {len(shape)} dimensions: at most {MAX_DIMS}")
    entry = TensorEntry(
        r.text(name, "a tensor name", max_len=MAX_PATH, empty=False),
        r.text(dtype, "a tensor dtype", max_len=MAX_DTYPE, empty=False),
        [r.whole(n, "a tensor dimension") for n in shape],
        r.hex64(digest, "a tensor's sha256"),
        r.whole(nbytes, "a tensor's size"),
        r.text(file, "a tensor's file", max_len=MAX_PATH, empty=False),
        r.whole(offset, "a tensor's offset"),
    )
    if entry.file not in files:
        raise InvalidObject(f"tensor {r.shown(entry.name)} lies in {r.shown(entry.file)}, no file")
    return entry


def _member(value: object) -> Member:
    if not (isinstance(value, list) and len(value) == len(MEMBER_FIELDS)):
        raise InvalidObject(f"member entry is {r.shown(value)}: [{', '.join(MEMBER_FIELDS)}]")
    role, label, commit, requested = value
    if not isinstance(role, str) or role not in {str(x) for x in Role}:
        raise InvalidObject(f"member role is {r.shown(role)}: one of {', '.join(Role)}")
    return Member(
        Role(role),
        r.text(label, "a member label", max_len=MAX_NAME, empty=False),
        r.hex64(commit, "a member commit"),
        r.text(requested, "a member's ref", max_len=MAX_REQUESTED),
    )


def _optional_hex(value: object, what: str) -> str | None:
    return None if value is None else r.hex64(value, what)


def _check_shape(c: NewCommit) -> None:
    """What each kind is, as the local commands make it."""
    if c.kind == Kind.ADAPTER and c.members:
        raise InvalidObject("an adapter commit has no members")
    if c.kind == Kind.SET and c.tensors:
        raise InvalidObject("a set commit has no tensors")
    if (c.base is None) != (c.base_fingerprint is None):
        raise InvalidObject("a commit names a base and its fingerprint, or neither")
    if len({(m.role, m.label) for m in c.members}) != len(c.members):
        raise InvalidObject("a set names each role and label once")
    if len({(t.file, t.name) for t in c.tensors}) != len(c.tensors):
        raise InvalidObject("a commit names each tensor of a file once")
