"""`RemoteBackend`: the repository backend over a registry's HTTP API.

The porcelain (`mint.porcelain`) runs here, on this machine, and moves only the bytes the
registry lacks or the caller needs; each operation the registry owns (a read, a head move, an
evaluation, a promote) is one request to it, answered by the same local functions a
`LocalBackend` runs, behind the registry's checks."""

from __future__ import annotations

import contextlib
import functools
import importlib
import tempfile
from pathlib import Path
from typing import Any

from mint.backend.local import REPOSITORY_OPERATIONS
from mint.commits.rows import NewCommit
from mint.ids import CommitId, Kind
from mint.objects import Base, CommitResult
from mint.remote.http import segment

_CALLS = "mint.remote.calls"  # one thin call per operation the registry owns


class RemoteBackend:
    """The backend of REMOTE, a `RemoteRepo`."""

    is_remote = True

    def __init__(self, remote):
        self.remote = remote

    def __repr__(self) -> str:
        return f"RemoteBackend({self.remote.url!r})"

    def __getattr__(self, name: str) -> Any:
        if name not in REPOSITORY_OPERATIONS:
            raise AttributeError(f"a backend has no operation {name!r}")
        call = getattr(importlib.import_module(_CALLS), name)
        return functools.partial(call, self.remote)

    @property
    def client(self):
        return self.remote.client

    def acting(self, by: str) -> str:
        """The token's identity: the registry records it for every write."""
        return self.remote.whoami()["name"]

    # -- reads ---------------------------------------------------------------------------

    def line_head(self, line: str, kind: Kind) -> tuple[str | None, str | None]:
        found = self.client.get(f"/lines/{segment(line)}/head", kind=str(kind))
        return found["head"], found["tree"]

    def existing(self, line: str, kind: Kind, tree: str) -> CommitId | None:
        found = self.client.get(f"/lines/{segment(line)}/trees/{tree}", kind=str(kind))
        return CommitId(found["id"]) if found["id"] else None

    def get_base(self, name: str) -> Base:
        from mint.bases import choose_base

        return choose_base(self.base_ls(), None, name)

    def find_base(self, adapter_base: str | None, explicit: str | None) -> Base:
        from mint.bases import choose_base

        return choose_base(self.base_ls(), adapter_base, explicit)

    # -- the blob store ------------------------------------------------------------------

    def stat_cache(self):
        from mint.commits.statcache import StatCache

        return contextlib.nullcontext(StatCache(None))

    def stage_adapter(self, scanned, cache):
        """Hashed here (one read of each file); sent at `record`, only what the registry
        lacks."""
        from mint.commits.adapter import hash_adapter

        hashed = hash_adapter(scanned)
        files = {hashed.blobs[f.path]: (Path(f.abspath), f.size) for f in scanned.files}
        return hashed, _Upload(self.client, files)

    def stage_bytes(self, datas: list[bytes]):
        return _Upload(self.client, {}, datas)

    def write_files(self, items, dest: Path, advance=None) -> tuple[int, int]:
        from mint.remote.blobs import download_files

        return download_files(self.client, items, dest, advance)

    def local_blobs(self, sizes: dict[str, int]):
        """The local blob cache, holding every blob of SIZES (those it lacked are downloaded
        and verified on arrival)."""
        from mint.remote.blobs import fetch_into_store

        fetch_into_store(self.client, self.remote.store, sizes, self.remote.cache)
        return self.remote.store

    # -- writes --------------------------------------------------------------------------

    def record(
        self, new: NewCommit, head: str | None, staged, signatures: list[bytes] = ()
    ) -> CommitResult:
        """Send the blobs the registry lacks (which, then one pack), then the commit (whose id
        the registry recomputes) with its head's move from HEAD, by compare-and-swap, and its
        SIGNATURES (bundles made here), all in the transaction that stores it: three
        requests."""
        from mint.errors import RefConflict
        from mint.exchange.receiving import HeadMove
        from mint.exchange.wire import commit_wire
        from mint.remote.transfer_client import post_objects

        sent = staged.store()
        payload = {"bases": [], "commits": [commit_wire(new)], "evaluations": []}
        payload["signatures"] = [{"commit": new.id, "bundle": b.decode()} for b in signatures]
        moved = post_objects(self.remote, payload, heads=[HeadMove(new.line, head, new.id)])
        for m in moved["heads"]:
            if m["result"] != "moved":
                raise RefConflict(f"line {new.line}", head, m["head"])
        signed = moved.get("signatures", 0)
        return CommitResult(new.id, new.line, new.parents, True, sent, signed)

    def propose(self, new: NewCommit, head: str | None, staged, description: str = ""):
        """Send the blobs the registry lacks, then the commit with its proposal to its line
        (the registry recomputes its id, and moves no head)."""
        from mint.remote.proposal_ops import propose

        sent = staged.store()
        made = propose(self.remote, new, head, description)
        return CommitResult(new.id, new.line, new.parents, True, sent, proposal=made["number"])

    def take_back(self, recorded: list[tuple[str, str | None, str]]) -> None:
        """Nothing: a registry moves heads forward only and deletes no commit, so commits
        recorded there stay, their lines' heads on them, as after a pushed line."""


class _Upload:
    """Blobs to send: files (id -> (path, size)) and literal bytes."""

    def __init__(self, client, files: dict, datas: list[bytes] = ()):
        self.client, self.files, self.datas = client, files, list(datas)

    def store(self) -> int:
        import hashlib

        from mint.remote.blobs import upload

        with tempfile.TemporaryDirectory(prefix="mint-blobs-") as tmp:
            files = dict(self.files)
            for i, data in enumerate(self.datas):
                part = Path(tmp) / str(i)
                part.write_bytes(data)
                files[hashlib.sha256(data).hexdigest()] = (part, len(data))
            return upload(self.client, files).bytes
