"""`LocalBackend`: the repository backend over a repository on this machine, its database and
its object store. A registry runs these same functions for the requests it answers."""

from __future__ import annotations

import contextlib
import functools
import importlib
from pathlib import Path
from typing import Any

from mint.commits.rows import NewCommit
from mint.ids import CommitId, Kind
from mint.repo import Repo

# The operations that run where the repository is, by name: (module, function). A façade
# call of one of these on a local repository runs it here; on a registry, the registry runs
# it (mint.remote.backend sends the request). The porcelain (mint.porcelain) calls them
# through `backend.NAME(...)`.
REPOSITORY_OPERATIONS: dict[str, tuple[str, str]] = {
    "base_add": ("mint.bases", "base_add"),
    "base_ls": ("mint.bases", "base_ls"),
    "resolve": ("mint.commits.repository", "resolve_rev"),
    "log": ("mint.commits.repository", "log"),
    "search": ("mint.search", "search"),
    "show": ("mint.commits.repository", "show"),
    "ls": ("mint.commits.repository", "ls"),
    "diff": ("mint.commits.repository", "diff"),
    "pulled": ("mint.commits.repository", "pulled"),
    "tag": ("mint.refs.tags", "tag"),
    "tag_list": ("mint.refs.tags", "tag_list"),
    "tag_delete": ("mint.refs.tags", "tag_delete"),
    "contract_add": ("mint.gates.contracts", "contract_add"),
    "contract_show": ("mint.gates.contracts", "contract_show"),
    "contract_ls": ("mint.gates.contracts", "contract_ls"),
    "record_evaluation": ("mint.gates.evaluations", "record"),
    "evaluations_of": ("mint.gates.evaluations", "evaluations_of"),
    "evaluation_checks": ("mint.gates.promotion", "evaluation_checks"),
    "gate": ("mint.gates.promotion", "gate"),
    "promote": ("mint.gates.promotion", "promote"),
    "approve": ("mint.gates.promotion", "approve"),
    "rollback": ("mint.gates.promotion", "rollback"),
    "channel_rm": ("mint.gates.promotion", "channel_rm"),
    "history": ("mint.gates.history", "history"),
    "history_verify": ("mint.gates.signed", "history_verify"),
    "status": ("mint.gates.history", "status"),
    "canary_of": ("mint.gates.canary", "canary_of"),
    "canary_start": ("mint.gates.canary", "canary_start"),
    "canary_stop": ("mint.gates.canary", "canary_stop"),
    "canary_status": ("mint.gates.canary", "canary_status"),
    "fleet_report": ("mint.fleet.records", "fleet_report"),
    "fleet": ("mint.fleet.reads", "fleet"),
    "fleet_history": ("mint.fleet.reads", "fleet_history"),
    "traces_ls": ("mint.traces.records", "traces_ls"),
    "traces_export": ("mint.traces.export", "traces_export"),
    "record_feedback": ("mint.traces.records", "record_feedback"),
    "write_traces": ("mint.traces.records", "write_traces"),
    "dataset_show": ("mint.traces.export", "dataset_show"),
    "token_create": ("mint.team.tokens", "token_create"),
    "token_ls": ("mint.team.tokens", "token_ls"),
    "token_revoke": ("mint.team.tokens", "token_revoke"),
    "protect": ("mint.team.protection", "protect"),
    "unprotect": ("mint.team.protection", "unprotect"),
    "protected_ls": ("mint.team.protection", "protected_ls"),
    "webhook_add": ("mint.team.webhooks", "webhook_add"),
    "webhook_ls": ("mint.team.webhooks", "webhook_ls"),
    "webhook_rm": ("mint.team.webhooks", "webhook_rm"),
    "webhook_deliveries": ("mint.team.webhooks", "webhook_deliveries"),
    "key_add": ("mint.signing.keys", "key_add"),
    "key_ls": ("mint.signing.keys", "key_ls"),
    "key_rm": ("mint.signing.keys", "key_rm"),
    "key_limit": ("mint.signing.trust", "key_limit"),
    "signature_prune": ("mint.signing.stored", "signature_prune"),
    "verify": ("mint.signing.commits", "verify"),
    "attach_signatures": ("mint.signing.commits", "attach_signatures"),
    "proposal_ls": ("mint.proposals", "proposal_ls"),
    "proposal_show": ("mint.proposals", "proposal_show"),
    "proposal_merge": ("mint.proposals", "proposal_merge"),
    "proposal_close": ("mint.proposals", "proposal_close"),
}


@functools.cache
def local_operation(name: str):
    module, attr = REPOSITORY_OPERATIONS[name]
    return getattr(importlib.import_module(module), attr)


class LocalBackend:
    """The backend of REPO, a repository on this machine."""

    is_remote = False

    def __init__(self, repo: Repo):
        self.repo = repo

    def __repr__(self) -> str:
        return f"LocalBackend({self.repo!r})"

    def __getattr__(self, name: str) -> Any:
        if name not in REPOSITORY_OPERATIONS:
            raise AttributeError(f"a backend has no operation {name!r}")
        return functools.partial(local_operation(name), self.repo)

    def acting(self, by: str) -> str:
        return by

    # -- reads ---------------------------------------------------------------------------

    def line_head(self, line: str, kind: Kind) -> tuple[str | None, str | None]:
        from mint.commits.repository import line_head

        with self.repo.db.read() as conn:
            return line_head(conn, line, kind)

    def existing(self, line: str, kind: Kind, tree: str) -> CommitId | None:
        from mint.commits.rows import newest_with_tree

        with self.repo.db.read() as conn:
            return newest_with_tree(conn, line, kind, tree)

    def get_base(self, name: str):
        from mint.bases import base_info, get_base

        with self.repo.db.read() as conn:
            return base_info(get_base(conn, name))

    def find_base(self, adapter_base: str | None, explicit: str | None):
        from mint.bases import base_info, find_base

        with self.repo.db.read() as conn:
            return base_info(find_base(conn, adapter_base, explicit))

    # -- the blob store ------------------------------------------------------------------

    @contextlib.contextmanager
    def stat_cache(self):
        from mint.commits.statcache import StatCache

        cache = StatCache.in_folder(self.repo.mint_dir)
        try:
            yield cache
        finally:
            cache.close()

    def stage_adapter(self, scanned, cache):
        """Hashed from the stat cache, or read once while the store copies it."""
        from mint.commits.ingest import from_cache, ingest, known_files

        known = known_files(scanned, cache)
        hashed, written = from_cache(scanned, known), None
        if hashed is None:
            hashed, written = ingest(scanned, self.repo.store, cache, known)
        return hashed, _AdapterBlobs(self.repo.store, hashed, written)

    def stage_bytes(self, datas: list[bytes]):
        return _Bytes(self.repo.store, datas)

    def write_files(self, items, dest: Path, advance=None) -> tuple[int, int]:
        from mint.commits.files import write_files

        return write_files(self.repo.store, items, dest, advance)

    def local_blobs(self, sizes: dict[str, int]):
        return self.repo.store

    # -- writes --------------------------------------------------------------------------

    def record(self, new: NewCommit, head: str | None, staged, signatures: list[bytes] = ()):
        """`Backend.record`; SIGNATURES (bundles, checked as a push's are) are kept in the
        commit's own transaction: one write, and none of it if one is refused."""
        from mint.commits.repository import record

        also = None
        if signatures:
            from mint.signing import SIGNATURE_FILE
            from mint.signing.commits import attach_any

            def also(conn, cid: str) -> int:
                return sum(attach_any(conn, cid, bundle, SIGNATURE_FILE) for bundle in signatures)

        return record(self.repo, new, head, staged.store, also)

    def propose(self, new: NewCommit, head: str | None, staged, description: str = ""):
        """`Backend.propose`: the commit and its proposal in one transaction; no head moves."""
        from mint.proposals import record_proposal

        return record_proposal(self.repo, new, head, staged.store, description)

    def take_back(self, recorded: list[tuple[str, str | None, str]]) -> None:
        """Undo commits this process just made, each (line, head before, commit), newest
        first, in one transaction: each line's head goes back by compare-and-swap (a line
        they made is removed), and a commit's rows go unless something refers to it already.
        Its blobs are left to gc."""
        from mint.commits.rows import delete_unreferenced
        from mint.refs import RefsContainer

        with self.repo.db.write() as conn:
            refs = RefsContainer(conn)
            for line, old, new in reversed(recorded):
                if refs.retract_head(line, new, old):
                    delete_unreferenced(conn, new)


class _AdapterBlobs:
    """The blobs of an adapter: the first time, nothing if the pass already stored them;
    otherwise every blob goes through put: one already stored is made young again for gc's
    grace period (a corrupt one replaced), a missing one copied and checked against the id
    it is recorded under (BlobChanged if the file no longer hashes to it)."""

    def __init__(self, store, hashed, written: int | None):
        self.store_, self.hashed = store, hashed
        self.done = [written] if written is not None else []

    def store(self) -> int:
        if self.done:
            return self.done.pop()
        files, blobs = self.hashed.scanned.files, self.hashed.blobs
        puts = [self.store_.put(f.abspath, blob_id=blobs[f.path]) for f in files]
        return sum(p.size for p in puts if p.written)


class _Bytes:
    def __init__(self, store, datas: list[bytes]):
        self.store_, self.datas = store, datas

    def store(self) -> int:
        return sum(len(d) for d in self.datas if self.store_.put_bytes(d).written)
