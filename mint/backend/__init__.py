"""The repository backend: what every client-side operation needs of a repository, whether
it lies on this machine or behind a registry's URL.

dulwich's porcelain runs over interchangeable transports; mint's does the same over this
protocol. `mint.porcelain` writes commit, set commit and derive, candidates, checkout,
export, set spec, evaluate and improve once, over a `Backend`; `LocalBackend`
(`mint.backend.local`) implements it with the repository's database and object store, and
`RemoteBackend` (`mint.remote.backend`) with HTTP calls to a registry, which runs the local
implementation on its side. What only the repository's own side may decide (who acts, whether
a head may move, whether a gate passes) stays there: a remote backend sends the request and
the registry's checks answer it.

`backend_of(repo)` is the one place that tells a local repository from a registry's.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from mint.commits.adapter import ScannedAdapter
    from mint.commits.rows import NewCommit
    from mint.commits.statcache import StatCache
    from mint.ids import CommitId, Kind
    from mint.objects import (
        Base,
        CommitDetail,
        CommitInfo,
        CommitResult,
        Contract,
        Evaluation,
        GateReport,
        LineStatus,
        Move,
    )
    from mint.store import ObjectStore


class Staged(Protocol):
    """Blobs a commit will refer to, hashed and ready: `store()` makes every one durable in
    the backend (sending only what it lacks) and returns the bytes it wrote. `record` calls it
    before the commit's metadata, and again if a gc removed a reused blob meanwhile."""

    def store(self) -> int: ...


@runtime_checkable
class Backend(Protocol):
    """A repository as the client-side operations see it."""

    is_remote: bool

    # -- who acts ------------------------------------------------------------------------
    def acting(self, by: str) -> str:
        """The name a write is recorded under: BY locally; the token's identity on a registry
        (a client cannot claim another name)."""

    # -- reads ---------------------------------------------------------------------------
    def resolve(self, rev: str) -> CommitId: ...
    def show(self, rev: str) -> CommitDetail: ...
    def line_head(self, line: str, kind: Kind) -> tuple[str | None, str | None]:
        """(head, head's tree) of LINE, which must hold KIND commits if it exists."""

    def existing(self, line: str, kind: Kind, tree: str) -> CommitId | None:
        """The newest KIND commit of LINE whose content is TREE, or None."""

    def get_base(self, name: str) -> Base: ...
    def find_base(self, adapter_base: str | None, explicit: str | None) -> Base: ...
    def pulled(self, repo_id: str, sha: str, path: str | None = None) -> CommitInfo | None:
        """The commit that holds hub commit SHA of REPO_ID (a set member's: folder PATH)."""

    def contract_show(
        self, name: str, version: int | None = None, line: str | None = None
    ) -> Contract: ...
    def evaluations_of(self, rev: str) -> list[Evaluation]: ...
    def status(
        self, *, limit: int | None = None, after: str | None = None
    ) -> list[LineStatus]: ...
    def history(
        self, ref: str, *, n: int | None = None, before: int | None = None
    ) -> list[Move]: ...
    def gate(self, rev: str, channel: str, contract: str | None = None) -> GateReport: ...

    # -- the blob store ------------------------------------------------------------------
    def stat_cache(self) -> AbstractContextManager[StatCache]: ...
    def stage_adapter(self, scanned: ScannedAdapter, cache: StatCache) -> tuple[object, Staged]:
        """(the adapter hashed, its blobs staged): a local store copies while it hashes."""

    def stage_bytes(self, datas: list[bytes]) -> Staged: ...
    def write_files(
        self, items: list[tuple[str, str | bytes]], dest: Path, advance=None
    ) -> tuple[int, int]:
        """Each (relative path, blob id or bytes) written under DEST, every blob verified;
        ADVANCE, if given, is called with the length of each chunk written."""

    def local_blobs(self, sizes: dict[str, int]) -> ObjectStore:
        """A store on this machine that holds every blob of SIZES (id -> size), verified."""

    # -- writes --------------------------------------------------------------------------
    def record(
        self, new: NewCommit, head: str | None, staged: Staged, signatures: list[bytes] = ()
    ) -> CommitResult:
        """Store the blobs, then the commit, and move its line's head from HEAD to it by
        compare-and-swap; SIGNATURES (bundles) are checked and kept in the same transaction
        (`mint.signing.stored`), and none of it is stored if one is refused."""

    def propose(
        self, new: NewCommit, head: str | None, staged: Staged, description: str = ""
    ) -> CommitResult:
        """Store the blobs, then the commit, and offer it to its line as a proposal
        (`refs/pr/N`, the result's `proposal`); no head moves. HEAD: the line's head it is
        proposed on."""

    def take_back(self, recorded: list[tuple[str, str | None, str]]) -> None:
        """Undo commits this process just made, each (line, head before, commit), where the
        repository allows it (a local one; a registry keeps them)."""

    def record_evaluation(
        self,
        rev: str,
        contract: str,
        metrics: dict,
        *,
        source: str,
        evaluator: dict | None = None,
        data_hash: str | None = None,
        by: str,
    ) -> Evaluation: ...


def backend_of(repo) -> Backend:
    """The backend of REPO: a registry's `RemoteRepo` carries its own; a local `Repo` gets
    a `LocalBackend`."""
    if getattr(repo, "is_remote", False) is True:
        return repo.backend
    from mint.backend.local import LocalBackend

    return LocalBackend(repo)
