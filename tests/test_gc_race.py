"""gc against commits that run at the same time: it never deletes a blob a commit needs.

A commit writes (or touches) its blobs, then inserts the rows that refer to them. gc
plans, then asks again right before each deletion; these tests stop it between the two,
and run it in a loop beside committers.
"""

import os
import threading
import time

import pytest

from mint import api, maintenance
from mint.errors import InvalidConfig
from mint.objects import GcPlan


@pytest.fixture
def based(repo, models):
    api.base_add(repo, "tiny-llama", models["base"])
    return repo


def blobs_of(repo, rev: str) -> set[str]:
    return {f.sha256 for f in api.show(repo, rev).files.values()}


def age(repo, blob_id: str, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(repo.store.local_path(blob_id), (t, t))


def test_a_blob_that_became_live_after_the_plan_stays(based, models):
    repo = based
    # The files of a2, stored by a commit that crashed before its transaction.
    orphans = {repo.store.put(p).id for p in models["a2"].iterdir()}
    plan, cutoff = maintenance.plan_gc(repo, grace_seconds=0)
    assert orphans <= set(plan.blobs)

    api.commit(repo, "y", models["a2"], "reuses the orphans", author="t")
    for blob_id in orphans:
        age(repo, blob_id, 3600)  # old again: only the database can save them now
    done = maintenance.execute_gc(repo, plan, cutoff)

    assert done.executed and not orphans & set(done.blobs)
    assert all(repo.store.has(b) for b in blobs_of(repo, "y"))
    assert maintenance.fsck(repo).ok


def test_a_blob_touched_after_the_plan_stays(based):
    repo = based
    orphan = repo.store.put_bytes(b"left by a commit that crashed").id
    plan, cutoff = maintenance.plan_gc(repo, grace_seconds=0)
    assert plan.blobs == [orphan] and plan.bytes == 29

    repo.store.touch(orphan)  # a commit is about to refer to it again
    assert maintenance.execute_gc(repo, plan, cutoff).blobs == []
    assert repo.store.has(orphan)
    assert maintenance.gc(repo, grace_seconds=0).blobs == [orphan]  # a later gc takes it
    assert not repo.store.has(orphan)


def test_gc_keeps_young_blobs_and_refuses_a_negative_grace(based):
    repo = based
    orphan = repo.store.put_bytes(b"young").id
    assert maintenance.gc(repo, grace_seconds=3600).blobs == []
    assert maintenance.gc(repo, dry_run=True, grace_seconds=0) == GcPlan(
        [orphan], 5, [], executed=False
    )
    assert repo.store.has(orphan)
    with pytest.raises(InvalidConfig, match="0 seconds or more"):
        maintenance.gc(repo, grace_seconds=-1)
    assert repo.store.has(orphan)


def test_gc_in_a_loop_never_takes_a_blob_a_commit_needs(based, models):
    repo = based
    api.commit(repo, "x1", models["a1"], "a1", author="t")
    api.commit(repo, "x2", models["a2"], "a2", author="t")
    stop, errors, collected = threading.Event(), [], []

    def collect() -> None:
        other = api.open_repo(repo.root)  # its own engine, as another process would have
        try:
            n = 0
            while not stop.is_set():
                other.store.put_bytes(f"left by crashed commit {n}".encode())
                n += 1
                collected.extend(maintenance.gc(other, grace_seconds=0).blobs)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            other.close()

    collector = threading.Thread(target=collect)
    collector.start()
    commits = []
    try:
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline and len(commits) < 100:
            folder = models["a1" if len(commits) % 2 else "a2"]  # bytes already stored
            r = api.commit(repo, f"y{len(commits)}", folder, "same bytes", author="t")
            assert r.created
            commits.append(r.id)
    finally:
        stop.set()
        collector.join(60)

    assert not errors, errors
    assert len(commits) >= 3 and collected  # both sides did work, at the same time
    for cid in commits:
        for blob_id in blobs_of(repo, cid):
            repo.store.verify(blob_id)
    report = maintenance.fsck(repo)
    assert report.ok, report.problems
    assert report.dangling == []  # each collector round collects the orphan it left


def test_commit_stores_again_a_blob_gc_deleted_under_it(repo, models, monkeypatch):
    """gc (grace 0) runs between a commit's blob writes and its transaction, and deletes the
    blobs the commit reused: the transaction finds them missing and the commit stores them
    again, so it lands whole."""
    from mint.commits import repository as operations

    api.base_add(repo, "tiny-llama", models["base"])
    files = sorted(models["a1"].iterdir())
    for f in files:
        repo.store.put(f)  # unreferenced: left by an interrupted commit
    real = operations.crash_point
    ran = []

    def gc_here(name):
        if name == "commit.after-blobs" and not ran:
            ran.append(api.gc(repo, grace_seconds=0))
        real(name)

    monkeypatch.setattr(operations, "crash_point", gc_here)
    result = api.commit(repo, "chat", models["a1"], "first", author="t")
    assert ran and len(ran[0].blobs) == len(files)  # gc did delete the reused blobs
    for f in api.show(repo, result.id).files.values():
        repo.store.verify(f.sha256)
    assert api.fsck(repo).ok
