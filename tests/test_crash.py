"""Kill -9 at every named step of a write; the repository stays whole.

Each write path calls `mint.faults.crash_point(NAME)` at its steps; a process started with
MINT_CRASH_AT=NAME kills itself there with SIGKILL. So the test picks the point instead of
sleeping and hoping. After each kill: fsck is clean, every ref points at a complete commit,
and the write either did not happen or happened whole.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest

from mint import api

from conftest import assert_whole

COMMIT_POINTS = ["commit.after-blobs", "commit.in-transaction", "commit.after-transaction"]
LANDED = {"commit.after-transaction", "promote.after-transaction", "rollback.after-transaction"}

MOL = """
name = "macaron"
base = "tiny-llama"
[router]
adapter = "router"
labels = ["chat"]
prompt = "route.md"
[experts]
chat = "chat"
[summary]
adapter = "chat"
prompt = "summary.md"
"""


def killed_at(repo, point: str, *args) -> subprocess.CompletedProcess:
    """Run `mint --repo REPO ARGS...` in a new process that kills itself at POINT."""
    env = {**os.environ, "MINT_CRASH_AT": point, "MINT_USER": "crasher"}
    cmd = [sys.executable, "-m", "mint", "--repo", str(repo.root), *map(str, args)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, (point, proc.returncode, proc.stderr)
    return proc


@pytest.fixture
def based(repo, mint, models):
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    return mint


@pytest.mark.parametrize("point", COMMIT_POINTS)
def test_commit_killed_at_each_step(based, repo, models, point):
    first = based("commit", "chat", models["a1"], "-m", "v1", "--json").json()["id"]
    killed_at(repo, point, "commit", "chat", models["a2"], "-m", "v2")
    assert_whole(repo)
    head = api.resolve(repo, "chat")
    if point in LANDED:
        assert api.show(repo, head).parents == [first]
    else:
        assert head == first
    # Whatever the kill left behind is unreferenced, and gc clears it.
    api.gc(repo, grace_seconds=0)
    assert api.fsck(repo).dangling == []
    # The same commit, run again, completes.
    assert based("commit", "chat", models["a2"], "-m", "v2").code == 0


@pytest.mark.parametrize("point", COMMIT_POINTS)
def test_set_commit_killed_at_each_step(based, repo, models, tmp_path, point):
    based("commit", "router", models["a1"], "-m", "router")
    based("commit", "chat", models["a2"], "-m", "chat")
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "mol.toml").write_text(MOL)
    (folder / "route.md").write_text("Route the request.\n")
    (folder / "summary.md").write_text("Summarise.\n")
    killed_at(repo, point, "set", "commit", folder / "mol.toml", "-m", "s1")
    assert_whole(repo)
    landed = "macaron" in {line.name for line in api.ls(repo)}
    assert landed == (point in LANDED)


@pytest.mark.parametrize("point", ["promote.in-transaction", "promote.after-transaction"])
def test_promote_killed(based, repo, models, point):
    a = based("commit", "chat", models["a1"], "-m", "v1", "--json").json()["id"]
    b = based("commit", "chat", models["a2"], "-m", "v2", "--json").json()["id"]
    assert based("promote", a, "--to", "production").code == 0
    killed_at(repo, point, "promote", b, "--to", "production")
    assert_whole(repo)
    holder = api.resolve(repo, "chat@production")
    moves = api.history(repo, "chat@production")
    assert holder == (b if point in LANDED else a)
    assert moves[-1].to == holder and len(moves) == (2 if point in LANDED else 1)


@pytest.mark.parametrize("point", ["rollback.in-transaction", "rollback.after-transaction"])
def test_rollback_killed(based, repo, models, point):
    a = based("commit", "chat", models["a1"], "-m", "v1", "--json").json()["id"]
    b = based("commit", "chat", models["a2"], "-m", "v2", "--json").json()["id"]
    based("promote", a, "--to", "production")
    based("promote", b, "--to", "production")
    killed_at(repo, point, "rollback", "chat@production", "--reason", "bad")
    assert_whole(repo)
    assert api.resolve(repo, "chat@production") == (a if point in LANDED else b)
    # The interrupted rollback can simply be run again (or was already done).
    if point not in LANDED:
        assert based("rollback", "chat@production").code == 0
        assert api.resolve(repo, "chat@production") == a


def test_no_crash_point_means_no_crash(based, repo, models, tmp_path):
    """The variable set to a name no step has changes nothing: a control for the above."""
    env = {**os.environ, "MINT_CRASH_AT": "no.such.point", "MINT_USER": "t"}
    folder = tmp_path / "a1"
    shutil.copytree(models["a1"], folder)
    cmd = [sys.executable, "-m", "mint", "--repo", str(repo.root), "commit", "chat", str(folder)]
    proc = subprocess.run([*cmd, "-m", "v1"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert len(api.log(repo, "chat")) == 1


def test_gc_killed_between_deletions(based, repo, models):
    """gc deletes blob by blob; killed between two, it leaves live blobs and a clean fsck."""
    based("commit", "chat", models["a1"], "-m", "v1")
    for i in range(3):
        repo.store.put_bytes(f"orphan {i}".encode())
    killed_at(repo, "gc.before-delete", "gc", "--grace", "0")
    assert_whole(repo)
    assert len(api.fsck(repo).dangling) == 3  # killed before its first deletion
    assert based("gc", "--grace", "0").code == 0
    assert api.fsck(repo).dangling == [] and api.fsck(repo).ok
