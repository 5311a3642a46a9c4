"""One hub repo through `huggingface_hub`, with its errors turned into mint's.

Everything the hub answers is checked before mint uses it: commit shas are 40 hex digits,
and every path of a file listing is a safe relative path. Offline, revisions resolve and
listings come from the HF cache through huggingface_hub's own cache functions.
"""

from __future__ import annotations

import contextlib
import glob
import importlib
import re
import time
from pathlib import Path

from mint.commits.adapter import safe_relpath
from mint.errors import (
    HubError,
    HubGated,
    HubRepoNotFound,
    HubRevisionNotFound,
    HubUnreachable,
    NeedsNetwork,
    UnsafePath,
)
from mint.hf.settings import SCHEME, HubSettings, is_safe_revision
from mint.progress import Progress

_SHA = re.compile(r"^[0-9a-f]{40}$")
_PLAIN_NAME = re.compile(r"^[^/\\\x00-\x1f\x7f]+$")  # one path component: no separator


class HubClient:
    """One hub repo: resolve revisions, list and download files into the HF cache.

    The files downloaded, and their bytes, are counted in PROGRESS (default: shown nowhere);
    huggingface_hub draws its own bars when PROGRESS draws (on a terminal) or
    `settings.progress` asks for them, and none otherwise."""

    def __init__(self, repo_id: str, settings: HubSettings, progress: Progress | None = None):
        from huggingface_hub import HfApi

        self.repo_id, self.settings = repo_id, settings
        self.progress = progress or Progress()
        self.where = f"{SCHEME}{repo_id}"
        self.api = HfApi(endpoint=settings.endpoint, token=settings.token, library_name="mint")

    # --- what the hub holds ------------------------------------------------------

    def tags(self) -> dict[str, str]:
        """Hub tag name -> commit sha."""
        with self.errors():
            found = self.api.list_repo_refs(self.repo_id).tags
        for t in found:
            if not is_safe_revision(t.name):
                raise HubError(f"{self.where} lists a tag mint cannot take: {t.name!r}")
        return {t.name: self._sha(t.target_commit, t.name) for t in found}

    def resolve(self, rev: str) -> str:
        """REV (branch, tag, sha) -> the 40-hex commit; offline, from the HF cache."""
        from huggingface_hub import errors as he

        if self.settings.offline:
            try:
                found = self.api.resolve_revision(
                    self.repo_id,
                    revision=rev,
                    cache_dir=self.settings.cache_dir,
                    local_files_only=True,
                )
            except he.RevisionResolutionError:
                raise self._not_cached(rev) from None
            return self._sha(found.resolved, rev)
        with self.errors():  # an unknown repo, not an unknown revision (olah: 401 to both)
            self.api.list_repo_refs(self.repo_id)
        with self.errors(rev):
            try:
                found = self.api.resolve_revision(
                    self.repo_id, revision=rev, cache_dir=self.settings.cache_dir
                )
            except he.RevisionResolutionError as exc:
                raise HubUnreachable(f"cannot reach {self._hub()}: {self._text(exc)}") from None
        sha = self._sha(found.resolved, rev)
        self.files(sha, rev)  # resolve_revision takes any sha as it is; listing it checks it
        return sha

    def files(self, sha: str, rev: str) -> list[str]:
        """Every file path of the commit (offline: its listing in the HF cache), each checked."""
        from huggingface_hub import errors as he
        from huggingface_hub import get_cached_repo_tree

        if self.settings.offline:
            try:
                tree = get_cached_repo_tree(
                    self.repo_id, revision=sha, cache_dir=self.settings.cache_dir
                )
            except he.CachedRepoTreeNotFoundError:
                raise self._not_cached(rev) from None
            paths = [f.path for f in tree]
        else:
            with self.errors(rev):
                paths = self.api.list_repo_files(self.repo_id, revision=sha)
        return sorted(_checked(p) for p in paths)

    def date(self, sha: str):
        """When the commit was made (the hub's lastModified of that revision)."""
        with self.errors(sha):
            return self.api.model_info(self.repo_id, revision=sha).last_modified

    def download(self, sha: str, rev: str, paths: list[str]) -> Path:
        """Fetch exactly PATHS (checked names) of SHA into the HF cache; returns the snapshot.
        Those that were not in the cache yet are counted in the client's progress."""
        new = [p for p in paths if not self._cached(sha, p)]
        began = time.monotonic()
        bars = self.progress.draws or self.settings.progress
        snapshot = self._snapshot(sha, rev, paths, bars)
        nbytes = sum(self.cached_file(snapshot, p).stat().st_size for p in new)
        self.progress.moved(nbytes, len(new), time.monotonic() - began)
        return snapshot

    def _cached(self, sha: str, path: str) -> bool:
        """Whether PATH of commit SHA is in the HF cache already."""
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(
            self.repo_id, safe_relpath(path), cache_dir=self.settings.cache_dir, revision=sha
        )
        return isinstance(found, str)

    def _snapshot(self, sha: str, rev: str, paths: list[str], bars: bool) -> Path:
        from huggingface_hub import ResolvedRevision, snapshot_download
        from huggingface_hub import errors as he

        patterns = [glob.escape(safe_relpath(p)) for p in paths]  # names, not globs
        _guard_cache_names()
        with self.errors(rev), _progress_bars(bars):
            try:
                return Path(
                    snapshot_download(
                        self.repo_id,
                        revision=ResolvedRevision(sha, rev, self.repo_id),
                        allow_patterns=patterns,
                        cache_dir=self.settings.cache_dir,
                        endpoint=self.settings.endpoint,
                        token=self.settings.token,
                        local_files_only=self.settings.offline,
                    )
                )
            except he.LocalEntryNotFoundError:
                if self.settings.offline:
                    raise self._not_cached(rev) from None
                where = f"{self.where}@{rev}"
                raise HubUnreachable(f"cannot download {where} from {self._hub()}") from None

    def cached_file(self, snapshot: Path, rel: str) -> Path:
        """The regular file behind REL of a snapshot, which must lie inside the HF cache."""
        cache = Path(self.settings.cache_dir).resolve()
        try:
            real = (snapshot / safe_relpath(rel)).resolve(strict=True)
        except (OSError, RuntimeError):
            where = f"{self.where}: {rel}"
            raise HubError(f"{where} is missing from the HF cache after its download") from None
        if not real.is_relative_to(cache) or not real.is_file():
            raise UnsafePath(rel)
        return real

    # --- errors ----------------------------------------------------------------------

    @contextlib.contextmanager
    def errors(self, rev: str | None = None):
        """Map huggingface_hub's exceptions; REV set: the repo is known to exist."""
        from huggingface_hub import errors as he

        not_found = (
            he.RepositoryNotFoundError,
            he.RevisionNotFoundError,
            he.RemoteEntryNotFoundError,
        )
        try:
            yield
        except he.GatedRepoError:
            message = f"{self.where} is gated and needs a token with access (HF_TOKEN)"
            raise HubGated(message) from None
        except not_found as exc:
            if rev is None or (isinstance(exc, he.RepositoryNotFoundError) and self._gone()):
                raise HubRepoNotFound(f"no hub repo {self.repo_id} at {self._shown()}") from None
            message = f"{self.where} has no revision {rev!r}"
            raise HubRevisionNotFound(message, known=self._known_refs()) from None
        except he.OfflineModeIsEnabled:
            raise NeedsNetwork(
                f"{self.where}: huggingface_hub is in offline mode; pulling it needs the network"
            ) from None
        except _transport_errors() as exc:
            raise HubUnreachable(f"cannot reach {self._hub()} ({self._text(exc)})") from None
        except he.HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else "?"
            what = f"revision {rev!r} of {self.where}" if rev else self.where
            raise HubError(f"{self._hub()} failed on {what}: HTTP {status}") from None

    def _gone(self) -> bool:
        try:
            self.api.list_repo_refs(self.repo_id)
            return False
        except Exception:  # noqa: BLE001 - any failure here means the repo cannot be listed
            return True

    def _known_refs(self) -> list[str] | None:
        try:
            r = self.api.list_repo_refs(self.repo_id)
        except Exception:  # noqa: BLE001 - the hint is best effort
            return None
        names = [b.name for b in r.branches] + [t.name for t in r.tags]
        return [n for n in names if is_safe_revision(n)]

    def _sha(self, sha: object, rev: str) -> str:
        if not isinstance(sha, str) or not _SHA.match(sha):
            raise HubError(f"{self._hub()} gave {sha!r} as the commit of {self.where}@{rev}")
        return sha

    def _not_cached(self, rev: str) -> NeedsNetwork:
        return NeedsNetwork(
            f"{self.where}@{rev} is not in the HF cache ({self.settings.cache_dir}) "
            "and HF_HUB_OFFLINE is set: pulling it needs the network"
        )

    def _hub(self) -> str:
        return f"the hub at {self._shown()}"

    def _shown(self) -> str:
        return self.settings.shown_endpoint

    def _text(self, exc: BaseException) -> str:
        """The first line of a library's error, with the endpoint's credentials hidden."""
        lines = str(exc).strip().splitlines()
        return self.settings.scrub(lines[0] if lines else type(exc).__name__)


def _guard_cache_names() -> None:
    """Make huggingface_hub's shared HTTP client refuse headers that would name paths.

    huggingface_hub names files in the HF cache after a download's ETag (`blobs/<etag>`) and
    commit header, as the hub sent them: a hostile hub could make it write outside the cache.
    The check refuses only values that are not one plain file name, so it harms no other user
    of that client.
    """
    from huggingface_hub import get_session

    session = get_session()
    hooks = session.event_hooks
    if _check_cache_names not in hooks["response"]:
        session.event_hooks = {**hooks, "response": [*hooks["response"], _check_cache_names]}


def _check_cache_names(response) -> None:
    for header in ("ETag", "X-Linked-Etag", "X-Repo-Commit"):
        value = response.headers.get(header)
        if value is None:
            continue
        name = value.lstrip("W/").strip('"')  # as huggingface_hub reads it
        if not _PLAIN_NAME.match(name) or name in (".", ".."):
            raise UnsafePath(name)


def _checked(path: object) -> str:
    """A path of a hub listing, if it is a safe relative path."""
    if not isinstance(path, str):
        raise UnsafePath(repr(path))
    return safe_relpath(path)


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP library's "could not talk to the server" errors (httpx2 in huggingface_hub 2)."""
    found = []
    for module, name in (
        ("httpx2", "TransportError"),
        ("httpx", "TransportError"),
        ("requests", "ConnectionError"),
    ):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


@contextlib.contextmanager
def _progress_bars(enabled: bool):
    """Turn huggingface_hub's bars off for the call when not wanted; restore them after."""
    from huggingface_hub.utils import (
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    if enabled or are_progress_bars_disabled():
        yield
        return
    disable_progress_bars()
    try:
        yield
    finally:
        enable_progress_bars()
