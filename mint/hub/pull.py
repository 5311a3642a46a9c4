"""Pull adapters and adapter sets from the Hugging Face Hub into the store.

`pull` resolves a hub revision to its 40-hex commit sha, downloads only the adapter files
with `huggingface_hub` (into the HF cache, which it then reuses offline), and commits them with
provenance `{"source": "hf", "repo", "revision", "sha"}`. The sha is indexed
(`commits.source_sha`), so a hub commit already in the store is found with one query, whatever
name it was asked by.

Every setting (endpoint, token, cache, offline) is read from the environment when a pull
runs, never at import, and passed to `huggingface_hub` explicitly: that library reads its own
copies at import time. Nothing here prints; the CLI renders the result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

from mint import schema as s
from mint.bases import find_base
from mint.commits.adapter import CONFIG, PICKLE_SUFFIXES, WEIGHTS, check_against_base, scan_adapter
from mint.commits.operations import commit as commit_adapter
from mint.refs import RefsContainer, check_name, find_line
from mint.refs.tags import tag as tag_commit
from mint.sets.mol import parse_mol, render_mol
from mint.sets.operations import set_commit
from mint.errors import (
    HubError,
    HubGated,
    HubRepoNotFound,
    HubRevisionNotFound,
    HubUnreachable,
    InvalidAdapter,
    InvalidConfig,
    InvalidHubUri,
    InvalidName,
    NeedsNetwork,
    PickleRefused,
    RefExists,
    WrongKind,
)
from mint.ids import CommitId
from mint.repo import Repo

SCHEME = "hf://"
DEFAULT_ENDPOINT = "https://huggingface.co"
DEFAULT_REVISION = "main"
SET_FILE = "mol.toml"
README = "README.md"
ADAPTER_FILES = (CONFIG, WEIGHTS, README)
_SHA = re.compile(r"^[0-9a-f]{40}$")
_TRUE = {"1", "ON", "YES", "TRUE"}


# --- settings and names -----------------------------------------------------


@dataclass(frozen=True)
class HubSettings:
    """Where and how to reach the hub. `from_env` reads the HF_* variables when called."""

    endpoint: str = DEFAULT_ENDPOINT
    token: str | None = None
    cache_dir: str = ""
    offline: bool = False
    progress: bool = False  # show huggingface_hub's progress bars (the CLI: on a TTY only)

    @classmethod
    def from_env(cls, env: dict | None = None, *, progress: bool = False) -> HubSettings:
        env = os.environ if env is None else env
        home = env.get("HF_HOME") or os.path.join(
            env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
        )
        home = os.path.expanduser(home)
        cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
        offline = (env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE") or "").upper() in _TRUE
        return cls(
            endpoint=(env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/"),
            token=env.get("HF_TOKEN") or _token_file(env.get("HF_TOKEN_PATH") or os.path.join(home, "token")),
            cache_dir=os.path.expanduser(cache), offline=offline, progress=progress,
        )  # fmt: skip


def _token_file(path: str) -> str | None:
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


@dataclass(frozen=True)
class HubUri:
    repo_id: str
    revision: str | None = None  # None: the default branch

    def __str__(self) -> str:
        return f"{SCHEME}{self.repo_id}" + (f"@{self.revision}" if self.revision else "")


_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def parse_uri(uri: str) -> HubUri:
    """hf://ORG/REPO[@REV] (the scheme is required: a bare path could be a folder)."""
    if not uri.startswith(SCHEME):
        raise InvalidHubUri(f"{uri!r} is not a hub address")
    rest = uri[len(SCHEME) :]
    repo_id, at, rev = rest.partition("@")
    if not _REPO_ID.match(repo_id) or ".." in repo_id or (at and not rev):
        raise InvalidHubUri(f"{uri!r} is not a hub address")
    return HubUri(repo_id, rev or None)


def mint_tag_name(hub_tag: str) -> str:
    """A hub tag as a mint tag: characters mint refuses become '-' ("release/2" -> "release-2")."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", hub_tag)
    name = re.sub(r"\.{2,}", ".", name).lstrip("._-").rstrip(".")
    name = name[:-5] + "-lock" if name.endswith(".lock") else name
    return check_name("tag", name[:100] or hub_tag)


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


@dataclass(frozen=True)
class PullResult:
    uri: str
    repo_id: str
    endpoint: str
    offline: bool
    pulled: list[Pulled]

    @property
    def created(self) -> int:
        return sum(p.created for p in self.pulled)


def find_pulled(repo: Repo, repo_id: str, sha: str, *, path: str | None = None):
    """The commit that holds hub commit SHA of REPO_ID (a member: its folder PATH), or None.

    One indexed lookup on `commits.source_sha`; the repo and folder are checked on the few
    rows that share the sha.
    """
    q = (
        sa.select(s.commits.c.id, s.commits.c.kind, s.commits.c.line, s.commits.c.provenance)
        .where(s.commits.c.source_sha == sha)
        .order_by(s.commits.c.created_at)
    )
    with repo.db.read() as conn:
        for row in conn.execute(q):
            prov = row.provenance or {}
            if prov.get("source") == "hf" and prov.get("repo") == repo_id and prov.get("path") == path:
                return row
    return None


# --- the hub, through huggingface_hub ------------------------------------------


class _Hub:
    """One hub repo through `huggingface_hub`, with its errors turned into mint's."""

    def __init__(self, repo_id: str, settings: HubSettings):
        from huggingface_hub import HfApi

        self.repo_id, self.settings = repo_id, settings
        self.api = HfApi(endpoint=settings.endpoint, token=settings.token, library_name="mint")
        self.storage = Path(settings.cache_dir) / ("models--" + repo_id.replace("/", "--"))

    @contextlib.contextmanager
    def errors(self, rev: str | None = None):
        """Map huggingface_hub's exceptions; REV set: the repo is known to exist."""
        from huggingface_hub import errors as he

        where = f"{SCHEME}{self.repo_id}"
        try:
            yield
        except he.GatedRepoError:
            raise HubGated(f"{where} is gated and needs a token with access (HF_TOKEN)") from None
        except (he.RevisionNotFoundError, he.RepositoryNotFoundError, he.RemoteEntryNotFoundError) as exc:
            if rev is None or (isinstance(exc, he.RepositoryNotFoundError) and self._gone()):
                raise HubRepoNotFound(f"no hub repo {self.repo_id} at {self.settings.endpoint}") from None
            raise HubRevisionNotFound(f"{where} has no revision {rev!r}", hint=self._known_refs()) from None
        except he.OfflineModeIsEnabled:
            raise NeedsNetwork(f"{where}: huggingface_hub is in offline mode; pulling it needs the network") from None
        except _transport_errors() as exc:
            raise HubUnreachable(f"cannot reach the hub at {self.settings.endpoint} ({_first_line(exc)})") from None
        except he.HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else "?"
            what = f"revision {rev!r} of {where}" if rev else where
            raise HubError(f"the hub at {self.settings.endpoint} failed on {what}: HTTP {status}") from None

    def _gone(self) -> bool:
        try:
            self.api.list_repo_refs(self.repo_id)
            return False
        except Exception:  # noqa: BLE001 - any failure here means the repo cannot be listed
            return True

    def _known_refs(self) -> str:
        try:
            r = self.api.list_repo_refs(self.repo_id)
        except Exception:  # noqa: BLE001 - the hint is best effort
            return "give a branch, a tag or a full commit sha"
        names = [b.name for b in r.branches] + [t.name for t in r.tags]
        return "it has " + ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")

    def tags(self) -> dict[str, str]:
        """Hub tag name -> commit sha."""
        with self.errors():
            return {t.name: t.target_commit for t in self.api.list_repo_refs(self.repo_id).tags}

    def resolve(self, rev: str) -> str:
        """REV (branch, tag, sha) -> the 40-hex commit; offline, from the cache's refs/."""
        from huggingface_hub import errors as he

        if self.settings.offline:
            if _SHA.match(rev):
                return rev
            ref = self.storage / "refs" / rev
            if not ref.is_file():
                raise self._not_cached(rev)
            return ref.read_text().strip()
        with self.errors():
            self.api.list_repo_refs(self.repo_id)  # unknown repo vs unknown revision: olah says 401 to both
        with self.errors(rev):
            try:
                sha = self.api.resolve_revision(self.repo_id, revision=rev, cache_dir=self.settings.cache_dir).resolved
            except he.RevisionResolutionError as exc:
                raise HubUnreachable(f"cannot reach the hub at {self.settings.endpoint}: {_first_line(exc)}") from None
            self.files(sha, rev)  # a sha is not checked by resolve_revision; listing it is
        return sha

    def files(self, sha: str, rev: str) -> list[str]:
        """Every file path of the commit; offline, the files the cache holds of it."""
        if self.settings.offline:
            snap = self.storage / "snapshots" / sha
            if not snap.is_dir():
                raise self._not_cached(rev)
            return sorted(p.relative_to(snap).as_posix() for p in snap.rglob("*") if not p.is_dir())
        with self.errors(rev):
            return self.api.list_repo_files(self.repo_id, revision=sha)

    def date(self, sha: str):
        with self.errors(sha):
            return self.api.model_info(self.repo_id, revision=sha).last_modified

    def download(self, sha: str, rev: str, patterns: list[str]) -> Path:
        """Fetch the files that match PATTERNS at SHA into the HF cache; returns the snapshot."""
        from huggingface_hub import ResolvedRevision, snapshot_download
        from huggingface_hub import errors as he

        with self.errors(rev), _progress_bars(self.settings.progress):
            try:
                return Path(snapshot_download(
                    self.repo_id, revision=ResolvedRevision(sha, rev, self.repo_id), allow_patterns=patterns,
                    cache_dir=self.settings.cache_dir, endpoint=self.settings.endpoint,
                    token=self.settings.token, local_files_only=self.settings.offline,
                ))  # fmt: skip
            except he.LocalEntryNotFoundError:
                if self.settings.offline:
                    raise self._not_cached(rev) from None
                raise HubUnreachable(f"cannot download {SCHEME}{self.repo_id}@{rev} from {self.settings.endpoint}") from None

    def _not_cached(self, rev: str) -> NeedsNetwork:
        return NeedsNetwork(
            f"{SCHEME}{self.repo_id}@{rev} is not in the HF cache ({self.settings.cache_dir}) "
            "and HF_HUB_OFFLINE is set: pulling it needs the network"
        )


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP library's "could not talk to the server" errors (httpx2 in huggingface_hub 2)."""
    import importlib

    found = []
    for module, name in (("httpx2", "TransportError"), ("httpx", "TransportError"), ("requests", "ConnectionError")):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@contextlib.contextmanager
def _progress_bars(enabled: bool):
    """Turn huggingface_hub's bars off for the call when not wanted; restore them after."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    if enabled or are_progress_bars_disabled():
        yield
        return
    disable_progress_bars()
    try:
        yield
    finally:
        enable_progress_bars()


# --- what to fetch ------------------------------------------------------------


@dataclass
class _Plan:
    """One hub commit to pull: its adapter folders ("" for the root) and, for a set, mol.toml."""

    rev: str
    sha: str
    kind: str  # adapter | set
    members: dict[str, list[str]]  # folder -> the repo paths of its adapter files
    extra: list[str] = field(default_factory=list)  # mol.toml and the prompts beside it
    mol: object = None  # a set's parsed mol.toml (mint.sets.MolFile)
    staged: Path | None = None  # regular files (links into the HF cache), as the repo lays them out

    def folder(self, member: str) -> Path:
        return self.staged / member if member else self.staged

    def patterns(self, weights: bool) -> list[str]:
        files = [f for fs in self.members.values() for f in fs]
        return self.extra + [f for f in files if weights or not f.endswith(".safetensors")]


def _plan(hub: _Hub, rev: str, sha: str) -> _Plan:
    files = hub.files(sha, rev)
    where = f"{SCHEME}{hub.repo_id}@{rev}"
    if SET_FILE not in files:
        return _Plan(rev, sha, "adapter", {"": _adapter_files(files, "", where)})
    mol = parse_mol(hub.download(sha, rev, [SET_FILE]) / SET_FILE)
    folders = sorted({_folder(ref, files, where, label) for _, label, ref in _member_refs(mol)})
    prompts = sorted({_norm(p) for p in (mol.route_prompt, mol.summary_prompt)})
    missing = [p for p in prompts if p not in files]
    if missing:
        raise InvalidConfig(f"{where}: {SET_FILE} names prompt files the repo lacks: {', '.join(missing)}")
    members = {f: _adapter_files(files, f, where) for f in folders}
    return _Plan(rev, sha, "set", members, [SET_FILE, *prompts], mol)


def _adapter_files(files: list[str], folder: str, where: str) -> list[str]:
    """The adapter files of FOLDER to fetch; refuses a folder without config or with only pickles."""
    prefix = f"{folder}/" if folder else ""
    mine = {f[len(prefix) :] for f in files if f.startswith(prefix) and "/" not in f[len(prefix) :]}
    here = f"{where}/{folder}" if folder else where
    if CONFIG not in mine:
        why = f"no {CONFIG}" + ("" if folder else f" or {SET_FILE} at the repo root")
        raise InvalidAdapter(here, why, hint="mint pulls PEFT adapter repos and adapter sets (mol.toml)")
    if WEIGHTS not in mine:
        pickles = sorted(f for f in mine if f.lower().endswith(PICKLE_SUFFIXES))
        if pickles:
            raise PickleRefused(here, pickles[0])
        raise InvalidAdapter(here, f"no {WEIGHTS}")
    return [prefix + f for f in ADAPTER_FILES if f in mine]


def _member_refs(mol) -> list[tuple[str, str, str]]:
    """(role, label, ref as written) for the router, each expert and the summary adapter."""
    experts = [("expert", label, ref) for label, ref in mol.experts.items()]
    return [("router", "router", mol.router), *experts, ("summary", "summary", mol.summary)]


def _norm(ref: str) -> str:
    return re.sub(r"^(\./)+", "", ref).rstrip("/")


def _folder(ref: str, files: list[str], where: str, label: str) -> str:
    folder = _norm(ref)
    if not folder or f"{folder}/{CONFIG}" not in files:
        raise InvalidConfig(
            f"{where}: {SET_FILE} member {label} = {ref!r} is not a folder of the repo with an {CONFIG}"
        )
    return folder


# --- pulling --------------------------------------------------------------------


def pull(
    repo: Repo,
    uri: str,
    *,
    line: str | None = None,
    base: str | None = None,
    tag: str | None = None,
    all_tags: bool = False,
    settings: HubSettings | None = None,
    by: str,
) -> PullResult:
    """Pull hf://ORG/REPO[@REV] (or every tag, oldest first) into the store as commits on LINE.

    Args:
        line: the line to commit on (default: REPO's name). A set's adapters go on lines named
            after their folders.
        base: the registered base (default: from each adapter_config.json).
        tag: also tag the commit LINE@TAG.
        all_tags: pull every hub tag, oldest first, each tagged with its hub name.
        settings: where the hub is (default: HubSettings.from_env(), read now).
    """
    settings = settings or HubSettings.from_env()
    ref = parse_uri(uri)
    if all_tags and (ref.revision or tag):
        raise InvalidHubUri(f"--all-tags pulls every tag of {ref.repo_id}; give no @REV and no --tag")
    line = _check_line(line or ref.repo_id.split("/")[1], explicit=line is not None)
    if tag:
        check_name("tag", tag)
    hub = _Hub(ref.repo_id, settings)
    if all_tags:
        targets = _tag_targets(hub)
    else:
        rev = ref.revision or DEFAULT_REVISION
        targets = [(rev, hub.resolve(rev), tag)]
    pulled = _pull_targets(repo, hub, targets, line, base, by)
    return PullResult(str(ref), ref.repo_id, settings.endpoint, settings.offline, pulled)


def _check_line(line: str, *, explicit: bool) -> str:
    try:
        return check_name("line", line)
    except InvalidName as exc:
        if not explicit:
            exc.hint = "pass --as LINE"
        raise


def _tag_targets(hub: _Hub) -> list[tuple[str, str, str]]:
    """(hub tag, sha, mint tag) for every tag, oldest first.

    The hub lists tags without order, and olah cannot list commits; so tags are ordered by
    their commit's date (model_info's lastModified), ties by natural order of the names.
    """
    if hub.settings.offline:
        raise NeedsNetwork(f"--all-tags lists the tags of {SCHEME}{hub.repo_id}: that needs the network")
    tags = hub.tags()
    dates = {sha: hub.date(sha) for sha in set(tags.values())}
    order = sorted(tags, key=lambda t: (dates[tags[t]].timestamp() if dates[tags[t]] else 0.0, _natural(t)))
    names: dict[str, str] = {}
    for t in order:
        other = names.setdefault(mint_tag_name(t), t)
        if other != t:
            raise RefExists(f"hub tags {other!r} and {t!r} would both be mint tag {mint_tag_name(t)!r}")
    return [(t, tags[t], mint_tag_name(t)) for t in order]


def _natural(name: str) -> list:
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name) if part]


def _pull_targets(repo: Repo, hub: _Hub, targets, line: str, base: str | None, by: str) -> list[Pulled]:
    """Check and fetch everything first; then commit and tag, in hub order."""
    plans: dict[str, _Plan] = {}
    for rev, sha, tag in targets:
        held = find_pulled(repo, hub.repo_id, sha)
        _check_tag_free(repo, held.line if held else line, tag, held.id if held else None)
        if held is None and sha not in plans:
            plans[sha] = _plan(hub, rev, sha)
    for plan in plans.values():  # configs first: a wrong base fails before the weights come
        _check_bases(repo, hub.download(plan.sha, plan.rev, plan.patterns(weights=False)), plan, base)
    with tempfile.TemporaryDirectory(prefix="pull-", dir=repo.mint_dir) as tmp:
        for plan in plans.values():
            snapshot = hub.download(plan.sha, plan.rev, plan.patterns(weights=True))
            plan.staged = _stage(snapshot, plan.patterns(weights=True), Path(tmp) / plan.sha)
            _check_plan(repo, plan, line, base)
        out = []
        for rev, sha, tag in targets:
            held = find_pulled(repo, hub.repo_id, sha)
            if held is not None:
                item = Pulled(rev, sha, CommitId(held.id), held.line, held.kind, created=False)
            else:
                item = _commit(repo, hub.repo_id, plans[sha], rev, line, base, Path(tmp), by)
            out.append(_tagged(repo, item, tag, by) if tag else item)
    return out


def _stage(snapshot: Path, paths: list[str], dest: Path) -> Path:
    """Lay PATHS out under DEST as regular files: hard links to the cache's blobs, else copies.

    The HF snapshot holds symbolic links, which mint never stores; a hard link costs no copy.
    Nothing ever writes to a staged file, so the cache is safe.
    """
    for rel in paths:
        src = (snapshot / rel).resolve()
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, target)
        except OSError:
            shutil.copyfile(src, target)
    return dest


def _check_tag_free(repo: Repo, line: str, tag: str | None, target: str | None) -> None:
    if not tag:
        return
    with repo.db.read() as conn:
        row = RefsContainer(conn).get(line, tag)
    if row is not None and row.target != target:
        raise RefExists(f"{line}@{tag} already points at {row.target[:12]}", hint="pull onto another line with --as LINE")


def _check_bases(repo: Repo, snapshot: Path, plan: _Plan, base: str | None) -> None:
    """Each adapter's base is registered (read from its config alone, before the weights)."""
    with repo.db.read() as conn:
        for member in plan.members:
            try:
                cfg = json.loads((snapshot / member / CONFIG).read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError):
                continue  # scan_adapter reports what is wrong with it, later
            find_base(conn, cfg.get("base_model_name_or_path") if isinstance(cfg, dict) else None, base)


def _check_plan(repo: Repo, plan: _Plan, line: str, base: str | None) -> None:
    """What api.commit checks, for every adapter of the plan, before anything is written."""
    with repo.db.read() as conn:
        for member in plan.members:
            scanned = scan_adapter(plan.folder(member))
            base_row = find_base(conn, scanned.base_name, base)
            check_against_base(scanned.root, scanned.header, base_row.config, base_row.name)
        lines = {line: plan.kind} if plan.kind == "adapter" else {line: "set"}
        lines.update({_member_line(m): "adapter" for m in plan.members if m})
        for name, kind in lines.items():
            row = find_line(conn, name)
            if row is not None and row.kind != kind:
                raise WrongKind(f"line {name} holds {row.kind} commits, not {kind}s", hint="pull with --as LINE")


def _member_line(folder: str) -> str:
    return check_name("line", folder.rsplit("/", 1)[-1])


def _provenance(repo_id: str, rev: str, sha: str, path: str | None = None) -> dict:
    prov = {"source": "hf", "repo": repo_id, "revision": rev, "sha": sha}
    return {**prov, "path": path} if path else prov


def _commit(repo: Repo, repo_id: str, plan: _Plan, rev: str, line: str, base: str | None, tmp: Path, by: str) -> Pulled:
    message = f"pull {SCHEME}{repo_id}@{rev}"
    if plan.kind == "adapter":
        r = commit_adapter(repo, line, plan.folder(""), message, author=by, base=base, provenance=_provenance(repo_id, rev, plan.sha))
        return Pulled(rev, plan.sha, r.id, r.line, "adapter", r.created, bytes_written=r.bytes_written)
    members = {}
    for folder in plan.members:
        held = find_pulled(repo, repo_id, plan.sha, path=folder)
        if held is not None:
            members[folder] = Pulled(rev, plan.sha, CommitId(held.id), held.line, held.kind, False, path=folder)
            continue
        r = commit_adapter(repo, _member_line(folder), plan.folder(folder), message, author=by, base=base,
                       provenance=_provenance(repo_id, rev, plan.sha, folder))  # fmt: skip
        members[folder] = Pulled(rev, plan.sha, r.id, r.line, "adapter", r.created, bytes_written=r.bytes_written, path=folder)  # fmt: skip
    toml_path = _write_mol(plan, {f: p.id for f, p in members.items()}, line, tmp / f"{plan.sha}.set")
    r = set_commit(repo, toml_path, message, author=by, provenance=_provenance(repo_id, rev, plan.sha))
    return Pulled(rev, plan.sha, r.id, r.line, "set", r.created, bytes_written=r.bytes_written,
                  members=list(members.values()))  # fmt: skip


def _tagged(repo: Repo, item: Pulled, tag: str, by: str) -> Pulled:
    r = tag_commit(repo, tag, item.id, by=by)
    return dataclasses.replace(item, tags=[*item.tags, f"{r.line}@{r.name}"])


# --- a set's mol.toml, pinned -------------------------------------------------


def _write_mol(plan: _Plan, ids: dict[str, str], line: str, dest: Path) -> Path:
    """mol.toml with each member folder replaced by its new commit id, its prompts beside it."""
    mol = plan.mol
    pin = {(role, label): ids[_norm(ref)] for role, label, ref in _member_refs(mol)}
    cfg = {
        "name": line, "protocol": mol.protocol, "base": mol.base,
        "router": {"adapter": pin["router", "router"], "labels": mol.labels, "prompt": _norm(mol.route_prompt),
                   "default": mol.default},
        "experts": {label: pin["expert", label] for label in mol.labels},
        "summary": {"adapter": pin["summary", "summary"], "prompt": _norm(mol.summary_prompt)},
    }  # fmt: skip
    _stage(plan.staged, sorted({cfg["router"]["prompt"], cfg["summary"]["prompt"]}), dest)
    path = dest / SET_FILE
    path.write_text(render_mol(cfg), encoding="utf-8")
    return path
