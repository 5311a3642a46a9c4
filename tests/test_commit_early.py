"""What `mint commit` does before it loads the database layer (mint.commits.early): the copy
of the folder starts on a thread while SQLAlchemy imports (published only once the commit's
checks passed), and an unchanged folder is answered from the stat cache and the SQLite file
without SQLAlchemy at all. Both must answer exactly what the long way answers."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest
from safetensors.numpy import load_file, save_file

from mint import api
from mint.commits import ahead, early
from mint.db import SCHEMA_HEAD

from conftest import one_line_error, snapshot
from support.imports import imported_by

WEIGHTS = "adapter_model.safetensors"


def process(repo, *args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """`mint --repo REPO ARGS...` as a new process: (what it did, the modules it imported)."""
    return imported_by("--repo", repo.root, *args, env={"MINT_USER": "test"})


def settle(folder) -> None:
    """Past the stat cache's racy window for FOLDER's files (about 10 ms on most systems)."""
    time.sleep(0.05)


def temps(repo) -> list:
    tmp = repo.store.root / "tmp"
    return sorted(tmp.iterdir()) if tmp.exists() else []


@pytest.fixture
def based(repo, models, tmp_path):
    """REPO with the tiny base, and a private copy of adapter a1."""
    api.base_add(repo, "tiny-llama", models["base"])
    folder = tmp_path / "adapter"
    shutil.copytree(models["a1"], folder)
    settle(folder)
    return repo, folder


def test_schema_head_is_the_one_the_database_layer_knows():
    assert early.schema_head() == SCHEMA_HEAD


def test_a_new_process_commits_what_it_read_ahead_byte_for_byte(based, tmp_path):
    repo, folder = based
    proc, modules = process(repo, "commit", "chat", folder, "-m", "first", "--json")
    assert proc.returncode == 0, proc.stderr
    made = json.loads(proc.stdout)
    assert made["created"] and made["bytes_written"] > 0
    detail = api.show(repo, made["id"])
    for path, f in detail.files.items():
        assert f.sha256 == hashlib.sha256((folder / path).read_bytes()).hexdigest()
    tensors = load_file(folder / WEIGHTS)
    raw = (folder / WEIGHTS).read_bytes()
    for t in detail.tensors:
        assert t.sha256 == hashlib.sha256(raw[t.offset : t.offset + t.nbytes]).hexdigest()
    assert {t.name for t in detail.tensors} == set(tensors)
    api.checkout(repo, made["id"], tmp_path / "out")
    for path in detail.files:
        assert (tmp_path / "out" / path).read_bytes() == (folder / path).read_bytes()
    assert temps(repo) == []
    assert "mint.commits.ingest" in modules


def test_an_unchanged_recommit_in_a_new_process_loads_no_database_layer(based):
    repo, folder = based
    first = api.commit(repo, "chat", folder, "first", author="test")
    proc, modules = process(repo, "commit", "chat", folder, "-m", "again")
    assert proc.returncode == 0, proc.stderr
    assert (
        proc.stdout.strip()
        == f"nothing to commit: {folder} is identical to chat ({first.id[:12]})"
    )
    on_sqlite = repo.db.dialect == "sqlite"
    assert ("sqlalchemy" in modules) != on_sqlite  # PostgreSQL: the long way, same answer
    assert "mint.objects" not in modules or not on_sqlite
    proc, _ = process(repo, "commit", "chat", folder, "-m", "again", "--json")
    assert json.loads(proc.stdout) == {
        "id": first.id,
        "line": "chat",
        "parents": [],
        "created": False,
        "bytes_written": 0,
        "signed": 0,
        "proposal": None,
    }


def test_the_shortcut_answers_only_what_the_long_way_would(based, models, tmp_path):
    """Each case where the folder is the head's files but the commit must not say "nothing
    to commit" (or must fail): the shortcut gives up, and the long way answers."""
    repo, folder = based
    first = api.commit(repo, "chat", folder, "first", author="test")
    root = str(repo.root)
    on_sqlite = repo.db.dialect == "sqlite"  # PostgreSQL: never the shortcut
    assert early.unchanged(root, folder, "chat") == (first.id if on_sqlite else None)
    assert early.unchanged(root, folder, "other-line") is None
    assert early.unchanged(root, folder, "chat", "no-such-base") is None
    assert early.unchanged(root, folder, "chat", texts=("a\x00b",)) is None
    # another version on the line: the folder is no longer its head
    other = api.commit(repo, "chat", models["a2"], "second", author="test")
    assert early.unchanged(root, folder, "chat") is None
    proc, _ = process(repo, "commit", "chat", folder, "-m", "back")
    assert proc.returncode == 0 and proc.stdout.strip() not in (first.id, other.id), proc
    # a file added to the folder: unknown to the stat cache
    (folder / "README.md").write_text("notes\n")
    settle(folder)
    assert early.unchanged(root, folder, "chat") is None


def test_the_shortcut_gives_up_on_a_database_at_another_schema(based):
    repo, folder = based
    api.commit(repo, "chat", folder, "first", author="test")
    if repo.db.dialect != "sqlite":
        assert early.unchanged(str(repo.root), folder, "chat") is None  # SQLite's alone
        return
    conn = sqlite3.connect(repo.mint_dir / "mint.db")
    with conn:
        conn.execute("UPDATE alembic_version SET version_num = '0001'")
    conn.close()
    assert early.unchanged(str(repo.root), folder, "chat") is None
    proc, _ = process(repo, "commit", "chat", folder, "-m", "again")
    assert proc.returncode != 0 and "mint db upgrade" in proc.stderr, proc
    assert "Traceback" not in proc.stderr


def test_a_refused_commit_leaves_nothing_of_its_read_ahead(based, mint):
    """The read-ahead copies the weights before the base is checked: nothing is published,
    and its temp files are gone when the command ends."""
    repo, folder = based
    config = json.loads((folder / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "some/other-base"
    (folder / "adapter_config.json").write_text(json.dumps(config))
    settle(folder)
    before = snapshot(repo)
    one_line_error(mint("commit", "chat", folder, "-m", "x"), "not a registered base")
    assert snapshot(repo) == before and temps(repo) == []
    proc, _ = process(repo, "commit", "chat", folder, "-m", "x")
    assert proc.returncode != 0 and "not a registered base" in proc.stderr, proc
    assert snapshot(repo) == before and temps(repo) == []


def test_nan_weights_are_refused_by_the_read_ahead_and_the_commit(based, mint):
    repo, folder = based
    tensors = load_file(folder / WEIGHTS)
    name = sorted(tensors)[0]
    tensors[name] = tensors[name].copy()
    tensors[name].flat[0] = float("nan")
    save_file(tensors, folder / WEIGHTS)
    settle(folder)
    before = snapshot(repo)
    one_line_error(mint("commit", "chat", folder, "-m", "x"), "NaN")
    assert snapshot(repo) == before and temps(repo) == []
    proc, _ = process(repo, "commit", "chat", folder, "-m", "x")  # the forked read-ahead's
    assert proc.returncode != 0 and "NaN" in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot(repo) == before and temps(repo) == []
    script = FORKED.replace("report = ahead.claim", "assert None is ahead.claim")
    script = script.split("\nstaged")[0]
    assert forked(repo, folder, "claim", script) is None  # the child refused: nothing staged
    assert temps(repo) == []


def test_a_file_changed_after_the_read_ahead_is_read_again(based, models, monkeypatch):
    """The read-ahead read the old weights; the commit's scan finds other stats, so the staged
    copy is dropped and the commit stores the new bytes. (In this process, on a thread: the
    forked read-ahead is for a new `mint commit`, tested below as one.)"""
    monkeypatch.setenv("MINT_READ_AHEAD", "thread")
    repo, folder = based
    early.start(str(repo.root), folder)
    for path in folder.iterdir():  # another version, written over the one read ahead
        shutil.copyfile(models["a2"] / path.name, path)
    settle(folder)
    made = api.commit(repo, "chat", folder, "new", author="test")
    assert not ahead._AHEAD and temps(repo) == []
    weights = api.show(repo, made.id).files[WEIGHTS].sha256
    assert weights == hashlib.sha256((folder / WEIGHTS).read_bytes()).hexdigest()
    raw = (folder / WEIGHTS).read_bytes()
    for t in api.show(repo, made.id).tensors:
        assert t.sha256 == hashlib.sha256(raw[t.offset : t.offset + t.nbytes]).hexdigest()


def test_a_read_ahead_no_commit_claims_is_dropped(based, monkeypatch):
    monkeypatch.setenv("MINT_READ_AHEAD", "thread")
    repo, folder = based
    early.start(str(repo.root), folder)
    early.stop()
    assert not ahead._AHEAD and temps(repo) == []
    assert list(repo.store.iter()) == []


# A new process forks its read-ahead: this script is one, claiming (or dropping) it itself.
FORKED = """
import json, sys
from pathlib import Path
from mint.commits import ahead, early
from mint.commits.adapter import scan_adapter
from mint.store.local import LocalObjectStore, _locked
root, folder, what = sys.argv[1:]
early.start(root, folder)
kinds = [type(a).__name__ for a in ahead._AHEAD.values()]
if what == "drop":
    early.stop()
    print(json.dumps({"kinds": kinds}))
    sys.exit()
store = LocalObjectStore(Path(root) / ".mint" / "objects")
report = ahead.claim(scan_adapter(Path(folder)), store)
staged = {p: [b.id, _locked(b.temp.path)] for p, (b, _) in report.staged.items()}
tensors = report.staged["adapter_model.safetensors"][1].tensors
for blob, _ in report.staged.values():
    blob.publish()
print(json.dumps({"kinds": kinds, "staged": staged, "tensors": tensors}))
"""


def forked(repo, folder, what: str, script: str = FORKED) -> dict | None:
    proc = subprocess.run(
        [sys.executable, "-c", script, str(repo.root), str(folder), what],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) if proc.stdout.strip() else None


def test_a_forked_read_ahead_hands_its_locked_copies_to_the_commit(based):
    """The child copies and hashes; the parent gets the temp files still locked (a gc in
    between would spare them), and what it publishes is the folder's bytes."""
    repo, folder = based
    said = forked(repo, folder, "claim")
    assert said["kinds"] == ["Forked"]
    files = {p.name for p in folder.iterdir()} - {"adapter_config.json"}  # the commit's own
    assert WEIGHTS in files and set(said["staged"]) == files
    for name, (blob, locked) in said["staged"].items():
        raw = (folder / name).read_bytes()
        assert locked and blob == hashlib.sha256(raw).hexdigest()
        assert repo.store.local_path(blob).read_bytes() == raw
    header = load_file(folder / WEIGHTS)
    assert set(said["tensors"]) == set(header) and temps(repo) == []


def test_a_forked_read_ahead_no_commit_claims_leaves_nothing(based):
    repo, folder = based
    assert forked(repo, folder, "drop")["kinds"] == ["Forked"]
    assert temps(repo) == [] and list(repo.store.iter()) == []


def test_a_read_ahead_child_killed_after_staging_leaves_nothing(based, tmp_path):
    """The child dies once its copies are staged, before it hands them over: the commit
    reads the folder itself, and the dead child's temp files are removed."""
    repo, folder = based
    proc, _ = imported_by(
        "--repo",
        repo.root,
        "commit",
        "chat",
        folder,
        "-m",
        "x",
        "--json",
        env={"MINT_USER": "test", "MINT_CRASH_AT": "commit.read-ahead-staged"},
    )
    assert proc.returncode == 0, proc.stderr
    made = json.loads(proc.stdout)
    assert made["created"] and temps(repo) == []
    api.checkout(repo, made["id"], tmp_path / "out")
    for path in folder.iterdir():
        assert (tmp_path / "out" / path.name).read_bytes() == path.read_bytes()
