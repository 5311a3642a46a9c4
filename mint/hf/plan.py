"""What a pull fetches from one hub commit, and how it lays the files out before committing.

Every path here comes from the hub, so each is checked (`safe_relpath`) before it is used:
the file listing's entries, mol.toml's prompt paths and member folders. Files are staged as
new files inside the repository, never over an existing one.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from mint.commits.adapter import CONFIG, WEIGHTS, safe_relpath
from mint.errors import InvalidConfig, NotAHubAdapter, PickleRefused
from mint.hf.client import HubClient
from mint.ids import PICKLE_SUFFIXES
from mint.sets.mol import MOL, MolFile, parse_mol, render_mol
from mint.signing import SIGNATURE_FILE

README = "README.md"
# model.sig: a folder's signature in the OpenSSF model-signing format, kept as the commit's
ADAPTER_FILES = (CONFIG, WEIGHTS, README, SIGNATURE_FILE)


@dataclass
class Plan:
    """One hub commit to pull: its adapter folders ("" for the root) and, for a set, mol.toml."""

    rev: str
    sha: str
    kind: str  # adapter | set
    members: dict[str, list[str]]  # folder -> the repo paths of its adapter files
    extra: list[str] = field(default_factory=list)  # mol.toml and the prompts beside it
    mol: MolFile | None = None  # a set's parsed mol.toml
    staged: Path | None = None  # new files (links to the HF cache's), as the hub lays them out
    set_dir: Path | None = None  # a set's prompts, where its pinned mol.toml will go
    verified: dict = field(default_factory=dict)  # folder -> the Signer its model.sig had

    def folder(self, member: str) -> Path:
        return self.staged / member if member else self.staged

    def paths(self, weights: bool) -> list[str]:
        files = [f for fs in self.members.values() for f in fs]
        return self.extra + [f for f in files if weights or not f.endswith(".safetensors")]

    def prompts(self) -> list[str]:
        return sorted({norm(self.mol.route_prompt), norm(self.mol.summary_prompt)})


def plan_commit(hub: HubClient, rev: str, sha: str) -> Plan:
    files = hub.files(sha, rev)  # every path checked safe
    where = f"{hub.where}@{rev}"
    if MOL not in files:
        return Plan(rev, sha, "adapter", {"": _adapter_files(files, "", where)})
    snapshot = hub.download(sha, rev, [MOL])
    hub.cached_file(snapshot, MOL)  # a file inside the HF cache
    mol = parse_mol(snapshot / MOL)
    prompts = sorted({_prompt(p, files, where) for p in (mol.route_prompt, mol.summary_prompt)})
    folders = sorted({_member_folder(ref, files, where, label) for _, label, ref in roles(mol)})
    members = {f: _adapter_files(files, f, where) for f in folders}
    plan = Plan(rev, sha, "set", members, [MOL, *prompts], mol)
    _check_collisions(plan.paths(weights=True), where)  # parse_mol checked the set's own layout
    return plan


def _adapter_files(files: list[str], folder: str, where: str) -> list[str]:
    """The adapter files of FOLDER to fetch; refuses one without a config, or with pickles only."""
    prefix = f"{folder}/" if folder else ""
    names = [f.removeprefix(prefix) for f in files if f.startswith(prefix)]
    mine = {name for name in names if "/" not in name}
    here = f"{where}/{folder}" if folder else where
    if CONFIG not in mine:
        also = "" if folder else f" or {MOL} at the repo root"
        raise NotAHubAdapter(here, f"no {CONFIG}{also}")
    if WEIGHTS not in mine:
        pickles = sorted(f for f in mine if f.lower().endswith(PICKLE_SUFFIXES))
        if pickles:
            raise PickleRefused(here, pickles[0])
        raise NotAHubAdapter(here, f"no {WEIGHTS}")
    return [prefix + f for f in ADAPTER_FILES if f in mine]


def roles(mol: MolFile) -> list[tuple[str, str, str]]:
    """(role, label, ref as written) for the router, each expert and the summary adapter."""
    experts = [("expert", label, ref) for label, ref in mol.experts.items()]
    return [("router", "router", mol.router), *experts, ("summary", "summary", mol.summary)]


def norm(ref: str) -> str:
    """A path as mol.toml may write it ("./chat/") as the hub lists it ("chat"), checked safe."""
    return safe_relpath(re.sub(r"^(\./)+", "", ref).rstrip("/"))


def _prompt(ref: str, files: list[str], where: str) -> str:
    path = norm(ref)
    if path not in files:
        raise InvalidConfig(f"{where}: {MOL} names a prompt file the repo lacks: {path}")
    return path


_PINNED = re.compile(r"^[0-9a-f]{64}$")


def member_path(ref: str, label: str) -> str:
    """The folder of a member: REF as a path; or, for a member pinned to a commit id (a set's
    checkout, as a mint registry serves it), the folder its layout gives it, its label."""
    return label if _PINNED.match(ref) else norm(ref)


def _member_folder(ref: str, files: list[str], where: str, label: str) -> str:
    folder = member_path(ref, label)
    if f"{folder}/{CONFIG}" not in files:
        raise InvalidConfig(
            f"{where}: {MOL} member {label} = {ref!r} is not a folder of the repo with an {CONFIG}"
        )
    return folder


def _check_collisions(paths: list[str], where: str) -> None:
    """No path twice, and none a folder of another: the files must lie side by side."""
    seen: set[str] = set()
    for path in paths:
        if path in seen:
            raise InvalidConfig(f"{where}: {path!r} would be written twice")
        seen.add(path)
    folders = {p.rsplit("/", i)[0] for p in seen for i in range(1, p.count("/") + 1)}
    clash = sorted(seen & folders)
    if clash:
        raise InvalidConfig(f"{where}: {clash[0]!r} would be both a file and a folder")


# --- staging ------------------------------------------------------------------


def stage(hub: HubClient, snapshot: Path, paths: list[str], dest: Path) -> Path:
    """Lay PATHS out under DEST as new regular files: hard links to the cache's blobs, else copies.

    The HF snapshot holds symbolic links, which mint never stores; a hard link costs no copy.
    Nothing ever writes to a staged file, so the cache is safe. A file that is already there
    is never written over.
    """
    for rel in paths:
        src = hub.cached_file(snapshot, rel)
        target = dest / safe_relpath(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            _link_or_copy(src, target)
        except FileExistsError:
            raise InvalidConfig(f"{hub.where}: {rel!r} would be written twice") from None
    return dest


def _link_or_copy(src: Path, target: Path) -> None:
    """A hard link to SRC at TARGET, else a copy into a new file; TARGET must not exist."""
    try:
        os.link(src, target)
        return
    except FileExistsError:
        raise
    except OSError:
        pass  # another file system, or links not allowed: copy
    with open(src, "rb") as fin, open(target, "xb") as fout:
        shutil.copyfileobj(fin, fout)


def pinned_mol(plan: Plan, ids: dict[str, str], line: str) -> str:
    """The set's mol.toml with each member folder replaced by its commit id, named LINE."""
    mol = plan.mol
    pin = {(role, label): ids[member_path(ref, label)] for role, label, ref in roles(mol)}
    return render_mol(
        {
            "name": line,
            "protocol": mol.protocol,
            "base": mol.base,
            "router": {
                "adapter": pin["router", "router"],
                "labels": mol.labels,
                "prompt": norm(mol.route_prompt),
                "default": mol.default,
            },
            "experts": {label: pin["expert", label] for label in mol.labels},
            "summary": {"adapter": pin["summary", "summary"], "prompt": norm(mol.summary_prompt)},
        }
    )
