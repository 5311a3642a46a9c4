"""fsck and gc. The live set comes from the database; the store never knows who refers to it.

gc races with commits, which write their blobs before the transaction that refers to
them. Two rules keep a blob a commit needs: a blob written or touched within the grace
period stays, and right before each deletion gc asks the database again whether the blob
became live and the store whether it became young.

A store with `listing()` and `delete_many()` (S3) is planned from its listing (ids, sizes
and last-modified times, 1000 keys a request; no request per blob) and emptied in batches of
up to 1000 keys, each batch re-checked under the lock exactly as a single blob is.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from concurrent.futures import ThreadPoolExecutor

import sqlalchemy as sa

from mint import schema as s
from mint.commits import rows
from mint.errors import EvaluationFailed, InvalidConfig, InvalidName, InvalidObject, UnsafePath
from mint.exchange import possession
from mint.exchange.received import CLOCK_SKEW
from mint.faults import crash_point
from mint.gates.contracts import check_version
from mint.gates.evaluations import evaluation_values
from mint.ids import Kind, as_utc, iso, utcnow
from mint.objects import FsckReport, GcPlan
from mint.repo import Repo
from mint.sets import pack
from mint.sets.bound import check_bound
from mint.store import BlobCorrupt, BlobMissing, ObjectStore

DEFAULT_GRACE_SECONDS = 3600
BATCH = 1000  # keys in one S3 DeleteObjects request
CHECKERS = 8  # threads asking the store for the ages of a batch


def live_blobs(conn) -> set[str]:
    """Every blob id that some commit's files refer to."""
    return {r[0] for r in conn.execute(sa.select(s.files.c.blob_id).distinct())}


def is_live(conn, blob_id: str) -> bool:
    """Whether some commit's files refer to BLOB_ID (one indexed lookup)."""
    q = sa.select(sa.literal(1)).where(s.files.c.blob_id == blob_id).limit(1)
    return conn.execute(q).first() is not None


# --- fsck ----------------------------------------------------------------------


def fsck(repo: Repo) -> FsckReport:
    """Re-hash every blob, and check that every reference points at something that exists."""
    problems: list[str] = []
    with repo.db.read() as conn:
        commits = {r[0] for r in conn.execute(sa.select(s.commits.c.id))}
        problems += _dangling_refs(conn, commits)
        problems += _bad_contracts(conn) + _bad_evaluations(conn, commits)
        problems += _unbound_sets(conn)
        problems += _bad_signatures(conn)
    stored = set()
    for blob_id in repo.store.iter():
        try:
            repo.store.verify(blob_id)
        except BlobCorrupt as exc:
            problems.append(f"corrupt blob {blob_id}: its bytes hash to {exc.actual}")
        except BlobMissing:
            continue  # deleted while we looked (a gc that runs meanwhile)
        stored.add(blob_id)
    with repo.db.read() as conn:  # after the blobs: a commit made meanwhile has its blobs
        live = live_blobs(conn)
        packs = pack.recorded_packs(conn)  # a set's pack: referred to, rebuilt when missing
    for blob_id in sorted(live - stored):
        if not repo.store.has(blob_id):
            problems.append(f"missing blob {blob_id}, referred to by a commit")
    return FsckReport(len(stored), len(commits), problems, sorted(stored - live - packs))


def _dangling_refs(conn, commits: set[str]) -> list[str]:
    out = []
    for r in conn.execute(sa.select(s.lines.c.name, s.lines.c.head)):
        if r.head is not None and r.head not in commits:
            out.append(f"line {r.name} points at missing commit {r.head}")
    for r in conn.execute(sa.select(s.refs.c.line, s.refs.c.name, s.refs.c.target)):
        if r.target not in commits:
            out.append(f"{r.line}@{r.name} points at missing commit {r.target}")
    parents = sa.select(s.commit_parents.c.commit_id, s.commit_parents.c.parent_id)
    for r in conn.execute(parents):
        if r.parent_id not in commits:
            out.append(f"commit {r.commit_id} has missing parent {r.parent_id}")
    for r in conn.execute(sa.select(s.set_members.c.commit_id, s.set_members.c.member_id)):
        if r.member_id not in commits:
            out.append(f"set {r.commit_id} pins missing commit {r.member_id}")
    return out


def _bad_contracts(conn) -> list[str]:
    """Contract versions that are no whole number from 1 (a push once stored `2.0` as 2)."""
    c = s.contracts.c
    out = []
    for r in conn.execute(sa.select(c.id, c.name, c.version).order_by(c.name, c.version)):
        try:
            check_version(r.version)
        except InvalidObject as exc:
            out.append(f"contract {r.name} ({r.id[:12]}): {exc}")
    return out


def _bad_evaluations(conn, commits: set[str]) -> list[str]:
    """Evaluation rows that `mint eval` would not have recorded: metrics that do not fit
    their contract version or are not finite numbers, an unknown source, no identity, a
    time in the future, or a commit or contract version that is not here."""
    contracts = {
        r.id: r.body for r in conn.execute(sa.select(s.contracts.c.id, s.contracts.c.body))
    }
    latest = utcnow() + CLOCK_SKEW
    out = []
    for r in conn.execute(sa.select(s.evaluations).order_by(s.evaluations.c.id)):
        what = f"evaluation {r.id} of {str(r.commit_id)[:12]}"
        if r.commit_id not in commits:
            out.append(f"{what}: its commit is missing")
        if r.contract_id not in contracts:
            out.append(f"{what}: its contract version {str(r.contract_id)[:12]} is missing")
            continue
        try:
            evaluation_values(
                contracts[r.contract_id],
                r.metrics,
                source=r.source,
                evaluator=r.evaluator,
                data_hash=r.data_hash,
                by=r.by,
            )
        except EvaluationFailed as exc:
            out.append(f"{what}: {exc}")
        if as_utc(r.at) > latest:
            out.append(f"{what}: it was made at {iso(r.at)}, in the future")
    return out


def _unbound_sets(conn) -> list[str]:
    """Set commits whose config is not what `mint set commit` writes for their members (an
    older version's push stored such rows): the receiver's check, mint.sets.bound."""
    c = s.commits.c
    out = []
    for cid in conn.execute(sa.select(c.id).where(c.kind == Kind.SET).order_by(c.id)).scalars():
        d = rows.detail(conn, cid)
        try:
            check_bound(d.line, d.base, d.files, d.config, d.members)
        except (InvalidConfig, InvalidName, UnsafePath) as exc:
            out.append(f"set commit {cid}: {exc}")
    return out


def _bad_signatures(conn) -> list[str]:
    """Kept bundles that break the rules a bundle is kept by (mint.signing.stored): `mint
    signature prune` removes them."""
    from mint.signing.stored import bad_signatures

    return [
        f"commit {b.commit[:12]}: signature {b.sha256[:12]}: {b.why} (mint signature prune)"
        for b in bad_signatures(conn)
    ]


# --- gc ------------------------------------------------------------------------


def gc(
    repo: Repo, *, dry_run: bool = False, grace_seconds: float = DEFAULT_GRACE_SECONDS
) -> GcPlan:
    """Plan, then (unless DRY_RUN) delete blobs that no commit refers to, and temp files
    of writers that died. Blobs written or touched in the last GRACE_SECONDS stay.

    The plan lists what would go; after execution, what went (a blob that became live
    or young meanwhile stays, and is not listed). A deleted blob's upload grants
    (mint.exchange.possession) go with it, in the transaction that deletes it."""
    plan, cutoff = plan_gc(repo, grace_seconds=grace_seconds)
    if dry_run:
        return plan
    return execute_gc(repo, plan, cutoff)


def plan_gc(repo: Repo, *, grace_seconds: float = DEFAULT_GRACE_SECONDS) -> tuple[GcPlan, float]:
    """What gc would delete, and the cutoff (seconds since the epoch) its blobs are older
    than. Nothing changes."""
    if grace_seconds < 0:
        raise InvalidConfig("the grace period must be 0 seconds or more")
    cutoff = time.time() - grace_seconds  # before the live set is read: see execute_gc
    with repo.db.read() as conn:
        live = live_blobs(conn) | pack.live_packs(conn)  # a pack: while a ref names its set
    doomed: dict[str, int] = {}
    graced: dict[str, tuple[float, int]] = {}  # unreferenced but young: (mtime, size)
    for blob_id, mtime, size in _unreferenced(repo.store, live):
        if mtime < cutoff:
            doomed[blob_id] = size
        else:
            graced[blob_id] = (mtime, size)
    temps = repo.store.stale_temps(grace_seconds)
    plan = GcPlan(
        sorted(doomed), sum(doomed.values()), temps, False, *_of_age(graced, grace_seconds)
    )
    return plan, cutoff


def _unreferenced(store: ObjectStore, live: set[str]):
    """(id, mtime, size) of each stored blob not in LIVE. A store with `listing()` (S3) gives
    them from its listing alone; a blob that goes while we look is skipped."""
    if hasattr(store, "listing"):
        for blob_id, item in store.listing():
            if blob_id not in live:
                yield blob_id, item["LastModified"].timestamp(), item["Size"]
        return
    for blob_id in store.iter():
        if blob_id in live:
            continue
        try:
            yield blob_id, store.mtime(blob_id), store.size(blob_id)
        except BlobMissing:
            continue


def _of_age(graced: dict[str, tuple[float, int]], grace_seconds: float) -> tuple:
    """(how many, their bytes, when the youngest passes the grace period) of GRACED."""
    if not graced:
        return 0, 0, None
    until = max(m for m, _ in graced.values()) + grace_seconds
    when = dt.datetime.fromtimestamp(until, dt.UTC).replace(microsecond=0)
    return len(graced), sum(size for _, size in graced.values()), iso(when)


def execute_gc(repo: Repo, plan: GcPlan, cutoff: float) -> GcPlan:
    """Carry out PLAN (from `plan_gc`, with its CUTOFF). Returns what was deleted.

    Each blob is checked again right before it goes: first the database (a commit
    inserts its rows after it wrote or touched its blobs), then the blob's age."""
    if hasattr(repo.store, "delete_many"):
        deleted, freed = _execute_batches(repo, plan.blobs, cutoff)
        for name in plan.temps:
            repo.store.remove_temp(name)
        return _done(plan, deleted, freed)
    deleted, freed = [], 0
    for blob_id in plan.blobs:
        crash_point("gc.before-delete")
        with repo.db.write() as conn:  # held while the blob goes: see Database.guard_blobs
            repo.db.guard_blobs(conn, exclusive=True)
            if is_live(conn, blob_id) or pack.live_packs(conn, [blob_id]):
                continue
            if not _older_than(repo.store, blob_id, cutoff):
                continue
            size = _size(repo.store, blob_id)
            possession.forget(conn, [blob_id])  # a grant is of stored bytes: it goes too
            pack.forget(conn, [blob_id])  # so is the record of a set's pack
            repo.store.delete(blob_id)
        deleted.append(blob_id)
        freed += size
    for name in plan.temps:
        repo.store.remove_temp(name)
    return _done(plan, deleted, freed)


def _done(plan: GcPlan, deleted: list[str], freed: int) -> GcPlan:
    """What an executed PLAN deleted; what the grace period kept stays as planned."""
    return dataclasses.replace(
        plan, blobs=deleted, bytes=freed, temps=list(plan.temps), executed=True
    )


def _execute_batches(repo: Repo, blobs: list[str], cutoff: float) -> tuple[list[str], int]:
    """Delete BLOBS in batches of up to BATCH keys: each batch, under the lock writers
    share, loses the blobs that became live (one query) or young (their ages asked from a few
    threads), and the rest go in one request. Returns (deleted ids, bytes freed)."""
    deleted, freed = [], 0
    with ThreadPoolExecutor(CHECKERS) as pool:
        for start in range(0, len(blobs), BATCH):
            batch = blobs[start : start + BATCH]
            sizes = dict(zip(batch, pool.map(lambda b: _size(repo.store, b), batch)))
            crash_point("gc.before-delete")
            with repo.db.write() as conn:  # held while the batch goes: see execute_gc
                repo.db.guard_blobs(conn, exclusive=True)
                dead = set(batch) - _live_among(conn, batch) - pack.live_packs(conn, batch)
                old = pool.map(lambda b: _older_than(repo.store, b, cutoff), sorted(dead))
                going = [b for b, is_old in zip(sorted(dead), old) if is_old]
                possession.forget(conn, going)
                pack.forget(conn, going)
                repo.store.delete_many(going)
            deleted += going
            freed += sum(sizes[b] for b in going)
    return deleted, freed


def _live_among(conn, blobs: list[str]) -> set[str]:
    """The ids among BLOBS that some commit's files refer to (one query)."""
    q = sa.select(s.files.c.blob_id).where(s.files.c.blob_id.in_(blobs)).distinct()
    return {r[0] for r in conn.execute(q)}


def _older_than(store: ObjectStore, blob_id: str, cutoff: float) -> bool:
    """Whether the blob was last written or touched before CUTOFF (False once it is gone)."""
    try:
        return store.mtime(blob_id) < cutoff
    except BlobMissing:
        return False


def _size(store: ObjectStore, blob_id: str) -> int:
    try:
        return store.size(blob_id)
    except BlobMissing:
        return 0
