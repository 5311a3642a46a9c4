"""Pull adapters and adapter sets from the Hugging Face Hub into a repository, local or a
registry's: written once over the repository backend.

`pull` resolves a hub revision to its 40-hex commit sha, downloads only the adapter files
with `huggingface_hub` on this machine (into the HF cache, which it then reuses offline), and
commits them through the porcelain's commit and set commit, with provenance
`{"source": "hf", "repo", "revision", "sha"}`. The repository indexes that sha, so a hub commit
already held is found with one request (`backend.pulled`), whatever name it was asked by.

A hub repository's `model.sig` (the OpenSSF model-signing format) comes with the adapter's
files and is kept as the commit's signature, checked first as a commit checks a folder's:
exactly the files pulled (`mint.hf.signature`). With `verify_signature`, a pull whose
signature is missing or does not verify with the keys given (default: the repository's trusted
keys) is refused before anything is stored.

A pull checks everything before it records anything: every path the hub names (file listings,
mol.toml's prompts and member folders) is a safe relative path, the files are staged as new
files (inside a local repository's `.mint`, or in the system's temporary folder for a
registry), and every adapter and the set commit are validated first. A set's member commits are
recorded before the set commit; should that still fail, a local repository takes them back.
Nothing here prints; the CLI renders the result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from mint.backend import Backend, backend_of
from mint.commits.adapter import CONFIG, check_against_base, scan_adapter
from mint.errors import (
    BaseMismatch,
    InvalidHubUri,
    InvalidName,
    NeedsNetwork,
    NotVerified,
    PullLineConflict,
    RefExists,
    RevisionNotFound,
    WrongKind,
)
from mint.hf.client import HubClient
from mint.hf.plan import Plan, pinned_mol, plan_commit, stage
from mint.hf.settings import SCHEME, HubSettings, mint_tag_name, parse_uri
from mint.hf.signature import check_staged, verify_bundles
from mint.ids import CommitId, Kind
from mint.objects import Signer
from mint.porcelain.commit import commit as commit_adapter
from mint.porcelain.commit import set_commit
from mint.progress import Progress
from mint.refs.revisions import check_name
from mint.sets.mol import MOL, parse_mol
from mint.signing import SIGNATURE_FILE

DEFAULT_REVISION = "main"
_PLACEHOLDER = "0" * 64  # a commit id, to check the pinned mol.toml before the members exist


# --- results ------------------------------------------------------------------


@dataclass(frozen=True)
class Pulled:
    """One hub commit in the store: a new commit, or the one that already held it."""

    revision: str  # as asked: a branch, a tag or a sha
    sha: str  # the hub commit
    id: CommitId
    line: str
    kind: str  # adapter | set
    created: bool  # False: the store already held this hub commit (or identical files)
    tags: list[str] = field(default_factory=list)  # LINE@TAG refs this pull set
    bytes_written: int = 0
    members: list[Pulled] = field(default_factory=list)  # a set's adapters
    path: str | None = None  # a member's folder in the hub repo
    signed: bool = False  # it came with a model.sig, kept as the commit's signature
    verified_by: Signer | None = None  # the key its model.sig verified with (verify_signature)


@dataclass(frozen=True)
class PullResult:
    uri: str
    repo_id: str
    endpoint: str  # without the credentials HF_ENDPOINT may carry
    offline: bool
    pulled: list[Pulled]

    @property
    def created(self) -> int:
        return sum(p.created for p in self.pulled)


# --- pulling --------------------------------------------------------------------


def pull(
    repo,
    uri: str,
    *,
    line: str | None = None,
    base: str | None = None,
    tag: str | None = None,
    all_tags: bool = False,
    settings: HubSettings | None = None,
    by: str,
    progress: Progress | None = None,
    verify_signature: bool = False,
    key: str | None = None,
    public_key: str | None = None,
) -> PullResult:
    """Pull hf://[ORG/]REPO[@REV] (or every tag, oldest first) into REPO as commits on LINE.

    Args:
        line: the line to commit on (default: REPO's name). A set's adapters go on lines named
            after their folders.
        base: the registered base (default: from each adapter_config.json).
        tag: also tag the commit LINE@TAG.
        all_tags: pull every hub tag, oldest first, each tagged with its hub name.
        settings: where the hub is (default: HubSettings.from_env(), read now).
        by: who pulls (recorded as the author of the commits and tags).
        progress: counts the files downloaded and their bytes (default: shown nowhere).
        verify_signature: refuse, before anything is stored, a hub commit whose model.sig is
            missing or does not verify with the repository's trusted keys (or only KEY, by
            name, or PUBLIC_KEY, a PEM, trusted or not).
    """
    settings = settings or HubSettings.from_env()
    ref = parse_uri(uri)
    if all_tags and (ref.revision or tag):
        raise InvalidHubUri(
            f"every tag of {ref.repo_id} is pulled with its own name: {uri!r} may name no "
            "revision, and no other tag is set"
        )
    line = _line(line, ref.repo_id)
    if tag:
        check_name("tag", tag)
    b = backend_of(repo)
    keys = _keys(b, key, public_key) if verify_signature else None
    hub = HubClient(ref.repo_id, settings, progress)
    if all_tags:
        targets = _tag_targets(hub)
    else:
        rev = ref.revision or DEFAULT_REVISION
        targets = [(rev, hub.resolve(rev), tag)]
    pulled = _pull_targets(repo, b, hub, targets, line, base, by, keys)
    return PullResult(str(ref), ref.repo_id, settings.shown_endpoint, settings.offline, pulled)


def _keys(b: Backend, key: str | None, public_key: str | None) -> dict:
    """fingerprint -> (name, PEM) of the keys a signature must verify with."""
    from mint.porcelain.signed import trusted

    return trusted(b, key, public_key)


def _line(line: str | None, repo_id: str) -> str:
    """LINE as given, else the repo's name, which must make a valid line name."""
    if line is not None:
        return check_name("line", line)
    name = repo_id.rsplit("/", 1)[-1]
    try:
        return check_name("line", name)
    except InvalidName as exc:
        raise PullLineConflict(name, exc.why) from None


def _tag_targets(hub: HubClient) -> list[tuple[str, str, str]]:
    """(hub tag, sha, mint tag) for every tag, oldest first.

    The hub lists tags without order, and olah cannot list commits; so tags are ordered by
    their commit's date (model_info's lastModified), ties by natural order of the names.
    """
    if hub.settings.offline:
        raise NeedsNetwork(f"listing the tags of {hub.where} needs the network")
    tags = hub.tags()
    dates = {sha: hub.date(sha) for sha in set(tags.values())}
    stamp = {t: dates[sha].timestamp() if dates[sha] else 0.0 for t, sha in tags.items()}
    order = sorted(tags, key=lambda t: (stamp[t], _natural(t)))
    names: dict[str, str] = {}
    for t in order:
        other = names.setdefault(mint_tag_name(t), t)
        if other != t:
            raise RefExists(
                f"hub tags {other!r} and {t!r} would both be mint tag {mint_tag_name(t)!r}"
            )
    return [(t, tags[t], mint_tag_name(t)) for t in order]


def _natural(name: str) -> list:
    parts = re.split(r"(\d+)", name)
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts if p]


def _pull_targets(
    repo, b: Backend, hub: HubClient, targets, line: str, base: str | None, by: str, keys
) -> list[Pulled]:
    """Check and fetch everything first; then commit and tag, in hub order."""
    plans: dict[str, Plan] = {}
    for rev, sha, tag in targets:
        held = b.pulled(hub.repo_id, sha)
        _check_tag_free(b, held.line if held else line, tag, held.id if held else None)
        if held is None and sha not in plans:
            plans[sha] = plan_commit(hub, rev, sha)
    for plan in plans.values():  # configs first: a wrong base fails before the weights come
        _check_bases(b, hub, plan, base)
    # staged files are moved into a local store, so they are made beside it
    with tempfile.TemporaryDirectory(prefix="pull-", dir=_staging_dir(repo, b)) as tmp:
        for plan in plans.values():
            _fetch(b, hub, plan, Path(tmp), line, base, keys)
        out = []
        for rev, sha, tag in targets:
            held = b.pulled(hub.repo_id, sha)
            if held is not None:
                if keys is not None:  # what is held is verified as a commit is
                    _verify_held(b, hub, held, rev, keys)
                item = Pulled(rev, sha, CommitId(held.id), held.line, held.kind, created=False)
            else:
                item = _commit(repo, b, hub.repo_id, plans[sha], rev, line, base, by)
            out.append(_tagged(b, item, tag, by) if tag else item)
    return out


def _staging_dir(repo, b: Backend) -> Path | None:
    """A local repository's `.mint` (on the store's file system); for a registry, None: the
    system's temporary folder."""
    return None if b.is_remote else repo.mint_dir


def _check_tag_free(b: Backend, line: str, tag: str | None, target: str | None) -> None:
    if not tag:
        return
    try:
        held = b.resolve(f"{line}@{tag}")
    except RevisionNotFound:
        return
    if held != target:
        raise PullLineConflict(line, f"its tag {tag} already points at {held[:12]}")


def _check_bases(b: Backend, hub: HubClient, plan: Plan, base: str | None) -> None:
    """Each adapter's base is registered (read from its config alone, before the weights)."""
    snapshot = hub.download(plan.sha, plan.rev, plan.paths(weights=False))
    for member in plan.members:
        config = hub.cached_file(snapshot, f"{member}/{CONFIG}" if member else CONFIG)
        try:
            cfg = json.loads(config.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            continue  # scan_adapter reports what is wrong with it, later
        named = cfg.get("base_model_name_or_path") if isinstance(cfg, dict) else None
        b.find_base(named if isinstance(named, str) else None, base)


def _fetch(b: Backend, hub: HubClient, plan: Plan, tmp: Path, line: str, base, keys) -> None:
    """Download the plan's files, stage them as new files under TMP, and check all of it."""
    if keys is not None and plan.kind == "set":
        where = f"{hub.where}@{plan.rev}"
        why = "a set's signature is not verified on pull yet (pull its member repos instead)"
        raise NotVerified(where, why)
    snapshot = hub.download(plan.sha, plan.rev, plan.paths(weights=True))
    plan.staged = stage(hub, snapshot, plan.paths(weights=True), tmp / plan.sha)
    if plan.kind == "set":
        plan.set_dir = stage(hub, snapshot, plan.prompts(), tmp / f"{plan.sha}.set")
    _check_plan(b, hub.repo_id, plan, line, base, tmp)
    for member in plan.members:  # the model.sig each adapter folder came with
        where = f"{hub.where}@{plan.rev}" + (f"/{member}" if member else "")
        plan.verified[member] = check_staged(plan.folder(member), where, keys)


def _verify_held(b: Backend, hub: HubClient, held, rev: str, keys: dict) -> None:
    """A hub commit already held, pulled again with verify_signature: one of its commit's
    signatures must verify with KEYS over its files, as `mint verify` checks them."""
    detail = b.show(held.id)
    files = {p: f.sha256 for p, f in detail.files.items()}
    where = f"{hub.where}@{rev}"
    verify_bundles([x.encode() for x in detail.signatures], files, keys, where, held.id)


def _check_plan(b: Backend, repo_id: str, plan: Plan, line: str, base: str | None, tmp: Path):
    """What the commits will check, for every adapter and the set, before anything is written."""
    held = {m: b.pulled(repo_id, plan.sha, path=m) for m in plan.members if m}
    fingerprints = {}
    for member in plan.members:
        scanned = scan_adapter(plan.folder(member))
        found = b.find_base(scanned.base_name, base)
        check_against_base(scanned.root, scanned.header, found.config, found.name)
        commit = held.get(member)
        fingerprints[member] = b.show(commit.id).base_fingerprint if commit else found.fingerprint
    lines = {_member_line(m): Kind.ADAPTER for m in plan.members if m}
    for name, kind in lines.items():
        _check_line_kind(b, name, kind, pull_line=False)
    _check_line_kind(b, line, Kind(plan.kind), pull_line=True)
    if plan.kind == "set":
        _check_set(b, plan, line, fingerprints, tmp)


def _check_line_kind(b: Backend, name: str, kind: Kind, *, pull_line: bool) -> None:
    """LINE holds KIND commits, or does not exist yet."""
    try:
        b.line_head(name, kind)
    except WrongKind:
        if not pull_line:
            raise
        other = Kind.SET if kind == Kind.ADAPTER else Kind.ADAPTER
        raise PullLineConflict(name, f"it holds {other} commits, not {kind}s") from None


def _check_set(b: Backend, plan: Plan, line: str, fingerprints: dict, tmp: Path) -> None:
    """What set_commit will check: the pinned mol.toml parses, and every member is on its base."""
    base = b.get_base(plan.mol.base)
    for member, fingerprint in fingerprints.items():
        if fingerprint != base.fingerprint:
            raise BaseMismatch(
                f"{MOL} member {member} is bound to another base than the set's ({base.name})"
            )
    check = tmp / f"{plan.sha}.check.toml"
    with open(check, "x", encoding="utf-8") as f:
        f.write(pinned_mol(plan, dict.fromkeys(plan.members, _PLACEHOLDER), line))
    parse_mol(check)


def _member_line(folder: str) -> str:
    return check_name("line", folder.rsplit("/", 1)[-1])


def _provenance(repo_id: str, rev: str, sha: str, path: str | None = None) -> dict:
    prov = {"source": "hf", "repo": repo_id, "revision": rev, "sha": sha}
    return {**prov, "path": path} if path else prov


# --- recording ------------------------------------------------------------------


def _commit(repo, b: Backend, repo_id: str, plan: Plan, rev, line, base, by: str) -> Pulled:
    if plan.kind == "set":
        return _commit_set(repo, b, repo_id, plan, rev, line, base, by)
    return _commit_folder(repo, repo_id, plan, rev, line, "", base, by)[1]


def _commit_folder(repo, repo_id: str, plan: Plan, rev, line, folder: str, base, by: str):
    """(the commit, what was pulled) of the hub repository's FOLDER ("": its root) on LINE."""
    r = commit_adapter(
        repo,
        line,
        plan.folder(folder),
        f"pull {SCHEME}{repo_id}@{rev}",
        author=by,
        base=base,
        provenance=_provenance(repo_id, rev, plan.sha, folder),
    )
    pulled = Pulled(
        rev,
        plan.sha,
        r.id,
        r.line,
        "adapter",
        r.created,
        bytes_written=r.bytes_written,
        path=folder or None,
        signed=(plan.folder(folder) / SIGNATURE_FILE).is_file(),
        verified_by=plan.verified.get(folder),
    )
    return r, pulled


def _commit_set(repo, b: Backend, repo_id: str, plan: Plan, rev, line, base, by: str) -> Pulled:
    """Member commits, then the set commit; if that fails, the member commits are taken back
    (`_take_back`: on a local repository only)."""
    message = f"pull {SCHEME}{repo_id}@{rev}"
    members: dict[str, Pulled] = {}
    recorded: list[tuple[str, str | None, str]] = []  # (line, head before, new commit)
    try:
        for folder in plan.members:
            members[folder] = _commit_member(
                repo, b, repo_id, plan, rev, folder, base, by, recorded
            )
        mol_toml = plan.set_dir / MOL
        with open(mol_toml, "x", encoding="utf-8") as f:
            f.write(pinned_mol(plan, {m: p.id for m, p in members.items()}, line))
        provenance = _provenance(repo_id, rev, plan.sha)
        r = set_commit(repo, mol_toml, message, author=by, provenance=provenance)
    except BaseException:
        with contextlib.suppress(Exception):  # the error to report is the first one
            _take_back(b, recorded)
        raise
    return Pulled(
        rev,
        plan.sha,
        r.id,
        r.line,
        "set",
        r.created,
        bytes_written=r.bytes_written,
        members=list(members.values()),
    )


def _commit_member(repo, b, repo_id, plan, rev, folder, base, by, recorded: list) -> Pulled:
    held = b.pulled(repo_id, plan.sha, path=folder)
    if held is not None:
        return Pulled(rev, plan.sha, CommitId(held.id), held.line, held.kind, False, path=folder)
    r, pulled = _commit_folder(repo, repo_id, plan, rev, _member_line(folder), folder, base, by)
    if r.created:
        recorded.append((r.line, r.parents[0] if r.parents else None, r.id))
    return pulled


def _take_back(b: Backend, recorded: list[tuple[str, str | None, str]]) -> None:
    """Undo member commits of a set pull that failed, newest first (`backend.take_back`).

    A local repository moves each line's head back by compare-and-swap (a line this pull made
    is removed) and removes each commit's rows unless something refers to it already; its blobs
    are left to `gc`. A registry moves heads forward only and deletes no commit: there the
    member commits stay, their lines' heads on them, as after a pushed line.
    """
    if recorded:
        b.take_back(recorded)


def _tagged(b: Backend, item: Pulled, tag: str, by: str) -> Pulled:
    r = b.tag(tag, item.id, by=by)
    return dataclasses.replace(item, tags=[*item.tags, f"{r.line}@{r.name}"])
