"""fsck and gc. The live set comes from the database; the store never knows who refers to it."""

from __future__ import annotations

import time

import sqlalchemy as sa

from mint import schema as s
from mint.objects import FsckReport, GcPlan
from mint.repo import Repo
from mint.store import BlobCorrupt, BlobMissing

DEFAULT_GRACE_SECONDS = 3600


def live_blobs(conn) -> set[str]:
    return {r[0] for r in conn.execute(sa.select(s.files.c.blob_id).distinct())}


def fsck(repo: Repo) -> FsckReport:
    """Re-hash every blob, and check that every reference points at something that exists."""
    problems: list[str] = []
    with repo.db.read() as conn:
        live = live_blobs(conn)
        commits = {r[0] for r in conn.execute(sa.select(s.commits.c.id))}
        problems += _dangling_refs(conn, commits)
    stored = set()
    for blob_id in repo.store.iter():
        stored.add(blob_id)
        try:
            repo.store.verify(blob_id)
        except BlobCorrupt as exc:
            problems.append(f"corrupt blob {blob_id}: its bytes hash to {exc.actual}")
    for blob_id in sorted(live - stored):
        problems.append(f"missing blob {blob_id}, referred to by a commit")
    return FsckReport(len(stored), len(commits), problems, sorted(stored - live))


def _dangling_refs(conn, commits: set[str]) -> list[str]:
    out = []
    for r in conn.execute(sa.select(s.lines.c.name, s.lines.c.head)):
        if r.head is not None and r.head not in commits:
            out.append(f"line {r.name} points at missing commit {r.head}")
    for r in conn.execute(sa.select(s.refs.c.line, s.refs.c.name, s.refs.c.target)):
        if r.target not in commits:
            out.append(f"{r.line}@{r.name} points at missing commit {r.target}")
    for r in conn.execute(sa.select(s.commit_parents.c.commit_id, s.commit_parents.c.parent_id)):
        if r.parent_id not in commits:
            out.append(f"commit {r.commit_id} has missing parent {r.parent_id}")
    for r in conn.execute(sa.select(s.set_members.c.commit_id, s.set_members.c.member_id)):
        if r.member_id not in commits:
            out.append(f"set {r.commit_id} pins missing commit {r.member_id}")
    return out


def gc(repo: Repo, *, dry_run: bool = False, grace_seconds: float = DEFAULT_GRACE_SECONDS) -> GcPlan:
    """Plan, then (unless dry_run) delete blobs that no commit refers to.

    Blobs younger than the grace period stay: a commit writes its blobs before the
    transaction that refers to them, and gc must not race it.
    """
    with repo.db.read() as conn:
        live = live_blobs(conn)
    cutoff = time.time() - grace_seconds
    doomed = [b for b in repo.store.iter() if b not in live and _mtime(repo, b) < cutoff]
    temps = repo.store.stale_temps(grace_seconds)
    plan = GcPlan(doomed, sum(_size(repo, b) for b in doomed), [str(t) for t in temps], executed=False)
    if dry_run:
        return plan
    for b in doomed:
        repo.store.delete(b)
    for t in temps:
        t.unlink(missing_ok=True)
    return GcPlan(plan.blobs, plan.bytes, plan.temps, executed=True)


def _mtime(repo: Repo, blob_id: str) -> float:
    try:
        return repo.store.mtime(blob_id)
    except FileNotFoundError:
        return time.time()


def _size(repo: Repo, blob_id: str) -> int:
    try:
        return repo.store.size(blob_id)
    except BlobMissing:
        return 0
