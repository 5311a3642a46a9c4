"""What the API returns: frozen dataclasses. The CLI renders them; `--json` prints every field."""

from __future__ import annotations

from dataclasses import dataclass, field

from mint.ids import (
    Action,
    CanaryOutcome,
    CommitId,
    ContractId,
    EvalSource,
    Kind,
    RefKind,
    Role,
)


@dataclass(frozen=True)
class Base:
    name: str
    fingerprint: str
    config: dict
    source: str | None
    created_at: str


@dataclass(frozen=True)
class FileEntry:
    sha256: str
    size: int


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: str
    shape: list[int]
    sha256: str
    nbytes: int
    file: str = "adapter_model.safetensors"
    offset: int = 0


@dataclass(frozen=True)
class CommitInfo:
    """What `log` shows of a commit."""

    id: CommitId
    kind: Kind
    line: str
    parents: list[str]
    message: str
    author: str
    created_at: str
    meta: dict


@dataclass(frozen=True)
class Member:
    """One adapter of a set: its role, label and the exact commit pinned."""

    role: Role
    label: str
    commit_id: CommitId
    requested: str  # the ref as written in mol.toml


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class CommitResult:
    id: CommitId
    line: str
    parents: list[str]
    created: bool  # False when the content equalled the head and nothing was recorded
    bytes_written: int = 0


@dataclass(frozen=True)
class LineInfo:
    name: str
    kind: Kind
    head: str | None
    commits: int


@dataclass(frozen=True)
class RefInfo:
    line: str
    name: str
    kind: RefKind
    target: CommitId
    message: str | None
    updated_at: str


@dataclass(frozen=True)
class TensorChange:
    name: str
    rel_delta: float | None  # ‖B−A‖/‖A‖; None when it cannot be computed (non-float dtype)


@dataclass(frozen=True)
class TensorDiff:
    added: list[str]
    removed: list[str]
    changed: list[TensorChange]


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class CheckoutResult:
    id: CommitId
    path: str
    files: int
    bytes: int


@dataclass(frozen=True)
class FsckReport:
    blobs_checked: int
    commits_checked: int
    problems: list[str]
    dangling: list[str]  # blobs no commit refers to (not an error: gc removes them)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class AdapterFiles:
    """One stored adapter as the runtime needs it: its config and where its weights lie."""

    commit_id: CommitId
    config: dict  # adapter_config.json, parsed
    weights: str  # local path of the adapter_model.safetensors blob (read-only, in the store)
    blobs: list[str] = field(default_factory=list)  # every file's blob id, for verification
    line: str = ""  # the adapter's line: with the commit id, its name on vLLM (LINE@<commit>)


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Contract:
    id: ContractId
    name: str
    version: int
    channel: str
    requires: list[str]
    approvals: int
    metrics: list[dict]  # {"name", and any of "min", "max", "max_regression"}
    evaluator: dict | None  # {"command": [...], "timeout": seconds, "version": str?}
    lines: list[str] | None
    created_at: str
    created_by: str
    live: dict | None = None  # [live]: min_score, max_drop, min_traces (those given)
    signature: dict | None = None  # [signature]: required, keys (names of trusted keys)


@dataclass(frozen=True)
class ContractAdded:
    contract: Contract
    created: bool  # False when the file equalled the latest version


@dataclass(frozen=True)
class Check:
    """One row of a gate's table."""

    check: str
    required: str
    found: str
    ok: bool


@dataclass(frozen=True)
class Evaluation:
    id: int
    commit_id: CommitId
    contract_id: ContractId
    contract: str
    version: int
    metrics: dict
    source: EvalSource | str  # str: an unknown source, stored by an older mint
    evaluator: dict | None
    data_hash: str | None
    by: str
    at: str
    checks: list[Check] = field(default_factory=list)
    pushed_by: str | None = None  # who pushed it to this registry, when it came by push


@dataclass(frozen=True)
class GateReport:
    commit_id: CommitId
    line: str
    channel: str
    holder: str | None
    contracts: list[str]  # "name@vN" of each contract that guards the channel
    checks: list[Check]
    evaluations: list[int]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


@dataclass(frozen=True)
class Move:
    """One entry of a channel's history."""

    id: int
    at: str
    action: Action
    line: str
    channel: str
    from_: str | None
    to: str | None  # None: the channel was removed (`mint channel rm`)
    by: str
    reason: str | None
    contract: str | None
    evaluations: list[int]


@dataclass(frozen=True)
class Approval:
    commit_id: CommitId
    channel: str
    by: str
    at: str
    created: bool


@dataclass(frozen=True)
class LineStatus:
    name: str
    kind: Kind
    head: str | None
    channels: dict[str, str]
    # REMOTE/CHANNEL -> commit: each remote's channels as the last fetch saw them (read-only)
    remote: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Canary:
    """A candidate set served to a fraction of a channel's requests beside its holder."""

    id: int
    line: str
    channel: str
    candidate: CommitId
    baseline: CommitId  # the channel's holder when the canary started
    fraction: float
    started_at: str
    started_by: str
    stopped_at: str | None = None
    stopped_by: str | None = None
    outcome: CanaryOutcome | None = None
    reason: str | None = None


@dataclass(frozen=True)
class VariantStats:
    """Live feedback on one variant: traces served, those scored, the mean score and its
    95% Wilson interval (low, high), None while nothing is scored."""

    variant: str  # production | canary
    commit: CommitId
    traces: int
    scored: int
    mean: float | None
    low: float | None
    high: float | None


@dataclass(frozen=True)
class CanaryStatus:
    """A canary (the open one, else the latest) and its two variants side by side."""

    canary: Canary
    production: VariantStats
    candidate: VariantStats


@dataclass(frozen=True)
class Trace:
    """One served turn as recorded, with the latest feedback on it (None when there is none)."""

    id: str  # the completion id the server returned
    at: str
    set_line: str
    set_commit: CommitId
    variant: str  # the channel's name (production), canary, or the revision served
    label: str | None  # the expert that answered
    probs: dict | None  # label -> router probability (None when the caller named the expert)
    expert_commit: str | None
    user: str | None
    messages: list | None  # None when content capture was off
    response: str | None
    latency: dict  # stage -> seconds
    score: float | None = None
    feedback_label: str | None = None  # the expert that should have answered, if given


@dataclass(frozen=True)
class Dataset:
    """An export of traces, stored as a blob whose sha256 is `id`."""

    id: str
    format: str  # chat | router
    records: int
    size: int
    filters: dict
    created_at: str
    created_by: str
    path: str | None = None  # where the export was written, when this call wrote it


@dataclass(frozen=True)
class Candidate:
    """A configuration one step from a channel's holder: the holder with the newest commit
    of one member line (or of several) swapped in. Members are keyed by label: `router`,
    `summary`, or an expert's label."""

    description: str
    holder: CommitId  # the set commit it derives from
    members: dict[str, str]  # label -> adapter commit
    changed: list[str]  # the labels whose member differs from the holder's
    lines: list[str]  # the member lines whose heads were swapped in
    existing: CommitId | None  # a set commit of the line with exactly these members, if any

    @property
    def uses(self) -> dict[str, str]:
        """What `set derive` takes to build it: label -> commit, for the changed labels."""
        return {label: self.members[label] for label in self.changed}


@dataclass(frozen=True)
class LoopStep:
    """One thing a round of the loop did or found, with the numbers it rested on."""

    # derive | evaluate | refuse | promote | canary-start | canary-stop | rollback | wait
    action: str
    commit: str | None
    channel: str | None
    detail: str
    entry: int | None = None  # the history row it wrote, when it moved or logged something
    evaluation: int | None = None  # the evaluation it recorded or used


@dataclass(frozen=True)
class Round:
    """One step of the loop's state machine on a set line, and what it did."""

    line: str
    contract: str
    outcome: str  # rolled-back | promoted | stopped | waiting | canary-started | refused | idle
    steps: list[LoopStep]


# --- signing (issue 23) -------------------------------------------------------------------


@dataclass(frozen=True)
class SigningKey:
    """A public key the repository trusts, under a name."""

    name: str
    fingerprint: str  # sha256 of its PEM: the hint a model-signing bundle carries
    added_at: str
    added_by: str
    public_key: str = ""  # its PEM (public: a client verifies a folder with a registry's keys)


@dataclass(frozen=True)
class GeneratedKey:
    """A key pair `key generate` wrote: where, and the public key's fingerprint."""

    private_key: str
    public_key: str
    fingerprint: str
    encrypted: bool


@dataclass(frozen=True)
class Signer:
    """A signature that verified: the trusted key that made it."""

    key: str  # the key's name here ("" for a key given as a file)
    fingerprint: str
    bound: bool  # the bundle names the commit (mint --sign), not only its files


@dataclass(frozen=True)
class Verification:
    """What `verify` found: the commit (or folder) and who signed it."""

    target: str
    signers: list[Signer]
    # A set: each member's signature that the set's signature names, verified (one a member).
    members: list[MemberVerified] = field(default_factory=list)


@dataclass(frozen=True)
class MemberVerified:
    """A set's member whose signature verified: its folder in the set (router, summary or an
    expert's label), its commit, and the trusted key that signed it."""

    label: str
    commit: str
    signer: Signer
