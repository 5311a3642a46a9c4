"""What the plugin does without vLLM: a name `LINE@REV` to a verified adapter folder.

`AdapterSource` resolves REV on LINE through the repository or registry in MINT_REPO (any mint
revision: a tag, a channel, a commit id or a prefix), refuses what is not an adapter of that
line or was trained for another base than the one vLLM serves (compared by mint's base
fingerprint), and keeps each commit's files once in a cache folder named by the commit id.

A cached folder is re-hashed against the commit's file digests every time it is handed out:
a folder that does not match (a flipped byte, a file missing or cut short) is removed and
checked out again from the repository, which verifies every blob it writes. A folder is
written beside its final name and renamed into place, so a crash or a concurrent resolve
leaves either nothing or a complete folder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mint import api
from mint.bases import fingerprint_path
from mint.commits.adapter import safe_relpath
from mint.errors import (
    BaseMismatch,
    InvalidConfig,
    InvalidName,
    InvalidObject,
    NotVerified,
    WrongKind,
)
from mint.ids import Kind, is_url, vllm_name
from mint.objects import CommitDetail
from mint.signing.policy import judge, parse_keys
from mint.store.base import is_blob_id, sha256_file

TRUE = ("1", "true", "yes", "on")


def split_name(name: str) -> tuple[str, str] | None:
    """(LINE, REV) of a name `LINE@REV`; None for a name that is not mint's."""
    line, at, rev = name.partition("@")
    if not at or not line or not rev:
        return None
    return line, rev


@dataclass(frozen=True)
class Resolved:
    """An adapter version ready for vLLM: its name by content, its folder, and whether the
    name asked for moves (a channel or a line's head), so that it must be followed."""

    asked: str
    line: str
    commit: str
    path: str
    moves: bool

    @property
    def name(self) -> str:
        return vllm_name(self.line, self.commit)


def open_source(env: Mapping[str, str]):
    """The repository MINT_REPO names: a registry (with MINT_TOKEN, or the token `mint login`
    kept) or a local repository."""
    where = env.get("MINT_REPO")
    if not where:
        raise InvalidConfig("MINT_REPO is not set: give vLLM a registry URL or a repository path")
    if is_url(where):
        from mint.remote.config import cache_dir, token_for
        from mint.remote.repo import RemoteRepo

        return RemoteRepo(where, token_for(where, env), cache=cache_dir(env))
    return api.open_repo(where)


def default_cache(env: Mapping[str, str]) -> Path:
    """MINT_VLLM_CACHE, else $XDG_CACHE_HOME/mint/vllm (~/.cache/mint/vllm)."""
    if env.get("MINT_VLLM_CACHE"):
        return Path(env["MINT_VLLM_CACHE"]).expanduser()
    base = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or "~", ".cache")
    return Path(base).expanduser() / "mint" / "vllm"


class AdapterSource:
    """Resolves `LINE@REV` names against one repository and keeps their files in CACHE.

    With REQUIRE_SIGNED, a commit is fetched only if a trusted key of the repository (or
    registry), one of KEYS if any are named, signed it (`mint.signing.policy`, over
    `api.verify`): otherwise NotVerified, one line, and nothing is checked out or cached."""

    def __init__(
        self, repo, cache: str | Path, *, require_signed: bool = False, keys: Sequence[str] = ()
    ):
        self.repo = repo
        self.require_signed, self.keys = require_signed, tuple(keys)
        self.cache = Path(cache)
        self.cache.mkdir(parents=True, exist_ok=True)
        self._fingerprints: dict[str, str] = {}
        self._lock = threading.Lock()  # one checkout of a commit at a time

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> AdapterSource:
        """MINT_REPO, MINT_VLLM_CACHE; MINT_VLLM_REQUIRE_SIGNED=1 and MINT_VLLM_KEYS=a,b."""
        required = env.get("MINT_VLLM_REQUIRE_SIGNED", "").strip().lower() in TRUE
        keys = parse_keys(env.get("MINT_VLLM_KEYS") or None, "MINT_VLLM_KEYS")
        if keys and not required:
            raise InvalidConfig("MINT_VLLM_KEYS needs MINT_VLLM_REQUIRE_SIGNED=1")
        return cls(open_source(env), default_cache(env), require_signed=required, keys=keys)

    def commit_of(self, line: str, rev: str) -> str:
        """The commit `LINE@REV` names now (for following a name that moves)."""
        return api.resolve(self.repo, f"{line}@{rev}")

    def fetch(self, base: str, name: str) -> Resolved:
        """Resolve NAME (`LINE@REV`), check it fits BASE (the model vLLM serves: a folder or a
        Hub id in the local cache), and return its verified folder."""
        parts = split_name(name)
        if parts is None:
            raise InvalidName("adapter", name, "not LINE@REV")
        line, rev = parts
        detail = api.show(self.repo, name)
        if not is_blob_id(detail.id):  # a folder name below: a registry's answer is checked
            raise InvalidObject(f"{name} resolved to a malformed commit id")
        if detail.kind != Kind.ADAPTER:
            raise WrongKind(f"{name} is a {detail.kind} commit; vLLM loads adapter commits")
        if detail.line != line:
            raise WrongKind(f"{name} is commit {detail.id[:12]} of line {detail.line}, not {line}")
        self.check_base(detail, base)
        if self.require_signed:
            self.check_signed(name, detail.id)
        path = self.folder(detail)
        moves = not detail.id.startswith(rev.lower())
        return Resolved(name, line, detail.id, str(path), moves)

    def check_signed(self, name: str, commit: str) -> None:
        """Refuse COMMIT (named NAME) unless it is signed as required."""
        verdict = judge(lambda c: api.verify(self.repo, c), commit, self.keys)
        if not verdict.ok:
            raise NotVerified(f"{name} ({commit[:12]})", verdict.why)

    def check_base(self, detail: CommitDetail, base: str) -> None:
        """Refuse an adapter trained for another base than BASE, by mint's fingerprint."""
        served = self.fingerprint(base)
        if detail.base_fingerprint != served:
            raise BaseMismatch(
                f"{detail.line}@{detail.id[:12]} was committed for base {detail.base} "
                f"(fingerprint {str(detail.base_fingerprint)[:12]}), but this vLLM serves "
                f"{base} (fingerprint {served[:12]})"
            )

    def fingerprint(self, base: str) -> str:
        if base not in self._fingerprints:
            self._fingerprints[base] = fingerprint_path(_config_of(base))
        return self._fingerprints[base]

    def folder(self, detail: CommitDetail) -> Path:
        """The commit's files in the cache, verified; checked out anew when they do not
        match (or are not there)."""
        final = self.cache / detail.id
        with self._lock:
            if final.exists():
                if matches(final, detail):
                    return final
                shutil.rmtree(final)
            partial = Path(tempfile.mkdtemp(prefix=f".{detail.id}.", dir=self.cache))
            try:
                api.checkout(self.repo, detail.id, partial)
                if not matches(partial, detail):
                    raise InvalidObject(
                        f"the checkout of {detail.id[:12]} does not match its files"
                    )
                try:
                    os.replace(partial, final)
                except OSError:  # another process put it there first
                    if not matches(final, detail):
                        raise
            finally:
                shutil.rmtree(partial, ignore_errors=True)
            return final


def matches(folder: Path, detail: CommitDetail) -> bool:
    """Whether FOLDER holds every file of DETAIL with its recorded size and digest."""
    for rel, entry in detail.files.items():
        path = folder / safe_relpath(rel)
        try:
            if path.stat().st_size != entry.size or sha256_file(path) != entry.sha256:
                return False
        except OSError:
            return False
    return True


def _config_of(base: str) -> str:
    """The config.json of the model vLLM serves: BASE is a folder, or a Hub id whose
    snapshot lies in the local Hugging Face cache."""
    if Path(base).exists():
        return base
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(base, "config.json")
    if not isinstance(found, str):
        raise BaseMismatch(f"cannot read the config of the served model {base}")
    return found
