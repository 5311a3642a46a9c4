"""Commits, lines, tags, bases; diffs, checkouts, fsck and gc; what the runtime loads.

Defined plain; `mint.objects` makes each a frozen dataclass on first use."""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING

from mint.ids import CommitId, Kind, RefKind, Role, is_pickle
from mint.objects._lazy import frozen

if TYPE_CHECKING:
    from mint.objects._loop import Dataset


@frozen
class Base:
    name: str
    fingerprint: str
    config: dict
    source: str | None
    created_at: str


@frozen
class FileEntry:
    sha256: str
    size: int


@frozen
class TensorEntry:
    name: str
    dtype: str
    shape: list[int]
    sha256: str
    nbytes: int
    file: str = "adapter_model.safetensors"
    offset: int = 0


@frozen
class Decoration:
    """A name that points at a commit, as `mint log` shows it beside the commit (git's
    decorations): KIND is "head" (NAME is the line whose head it is), "tag", "channel", or
    "remote" (a remote's tag or channel as the last fetch saw it); NAME is how a revision
    writes it (chat, chat@v3, chat@production, chat@origin/production)."""

    name: str
    kind: str


@frozen
class CommitInfo:
    """What `log` shows of a commit; `refs`: the names that point at it (`log` fills them)."""

    id: CommitId
    kind: Kind
    line: str
    parents: list[str]
    message: str
    author: str
    created_at: str
    meta: dict
    refs: list[Decoration] = field(default_factory=list)


@frozen
class Member:
    """One adapter of a set: its role, label and the exact commit pinned."""

    role: Role
    label: str
    commit_id: CommitId
    requested: str  # the ref as written in mol.toml


@frozen
class CommitDetail:
    """What `show` shows: everything recorded for one commit."""

    id: CommitId
    kind: Kind
    line: str
    parents: list[str]
    message: str
    author: str
    created_at: str
    meta: dict
    base: str | None
    base_fingerprint: str | None
    files: dict[str, FileEntry]
    tensors: list[TensorEntry]
    peft: dict | None
    config: dict | None
    provenance: dict
    tags: list[str]
    members: list[Member] = field(default_factory=list)
    dataset: Dataset | None = None  # the export `meta.data` names, when it is a known one
    # model-signing bundles (Sigstore bundle JSON) the commit carries, oldest first (issue 23)
    signatures: list[str] = field(default_factory=list)
    # the whole tensor table: how many rows and their bytes. `tensors` holds all of them, a
    # page, or none (the registry's default answer is this summary alone, issue 24)
    tensor_count: int = 0
    tensor_bytes: int = 0

    @property
    def pickles(self) -> list[str]:
        """The files named as pickles (the Trainer's training_args.bin): kept as inert bytes
        of the commit, never loaded by mint."""
        return sorted(p for p in self.files if is_pickle(p))


@frozen
class CommitResult:
    id: CommitId
    line: str
    parents: list[str]
    created: bool  # False when the content equalled the head and nothing was recorded
    bytes_written: int = 0
    signed: int = 0  # signatures kept with the commit by this call (mint.signing.stored)
    proposal: int | None = None  # N of refs/pr/N: the commit was proposed to the line (issue 37)


@frozen
class MergeReplay:
    """A merge made again from its recipe (`mint merge --replay`)."""

    commit: CommitId
    identical: bool  # every file's bytes are the commit's
    differ: list[str]  # the paths whose bytes differ (or that one side lacks)
    recorded: dict  # the library versions that made the commit (peft, torch)
    now: dict  # and those that made it again


@frozen
class LineInfo:
    name: str
    kind: Kind
    head: str | None
    commits: int


@frozen
class RefInfo:
    line: str
    name: str
    kind: RefKind
    target: CommitId
    message: str | None
    updated_at: str


@frozen
class TensorChange:
    name: str
    # ‖B−A‖/‖A‖; None when it cannot be computed (a non-float dtype, a new shape, a zero A)
    rel_delta: float | None
    # the shapes, when they differ (a changed rank r): then there is no rel_delta
    shape_a: list[int] | None = None
    shape_b: list[int] | None = None


@frozen
class TensorDiff:
    added: list[str]
    removed: list[str]
    changed: list[TensorChange]


@frozen
class Diff:
    a: CommitId
    b: CommitId
    config: dict[str, list]  # key -> [value in a, value in b]
    tensors: TensorDiff
    files: dict[str, list]  # path -> [sha_a, sha_b] for files that differ
    members: dict[str, list] = field(default_factory=dict)  # sets: role:label -> [id_a, id_b]

    @property
    def empty(self) -> bool:
        t = self.tensors
        return not (self.config or self.files or self.members or t.added or t.removed or t.changed)


@frozen
class CheckoutResult:
    id: CommitId
    path: str
    files: int
    bytes: int
    replaced: CommitId | None = None  # --force: the commit whose checkout was there before


@frozen
class FsckReport:
    blobs_checked: int
    commits_checked: int
    problems: list[str]
    dangling: list[str]  # blobs no commit refers to (not an error: gc removes them)

    @property
    def ok(self) -> bool:
        return not self.problems


@frozen
class GcPlan:
    blobs: list[str]
    bytes: int
    temps: list[str]
    executed: bool
    # Unreferenced blobs that stay only because they are younger than the grace period, their
    # bytes, and when the youngest of them comes of age (ISO 8601; None when there is none).
    graced: int = 0
    graced_bytes: int = 0
    graced_until: str | None = None


@frozen
class AdapterFiles:
    """One stored adapter as the runtime needs it: its config and where its weights lie."""

    commit_id: CommitId
    config: dict  # adapter_config.json, parsed
    weights: str  # local path of the adapter_model.safetensors blob (read-only, in the store)
    blobs: list[str] = field(default_factory=list)  # every file's blob id, for verification
    line: str = ""  # the adapter's line: with the commit id, its name on vLLM (LINE@<commit>)


@frozen
class SetSpec:
    """A set commit resolved for serving: every member pinned, prompts as text."""

    id: CommitId
    name: str  # the set's line
    base: str
    base_fingerprint: str
    protocol: str
    labels: list[str]
    default: str
    router: AdapterFiles
    experts: dict[str, AdapterFiles]
    summary: AdapterFiles
    route_prompt: str
    summary_prompt: str
    blobs: list[str] = field(default_factory=list)  # every blob the set uses, members' included
    # an adapter line served alone: its one label is the line, router, expert and summary are
    # that adapter, and no routing or summary runs (`mint serve chat@production`)
    single: bool = False
