"""Progress of long transfers (issue 22): push, fetch, clone, pull, checkout and export show
a tqdm bar on a terminal's stderr, and nothing there with --quiet or MINT_NO_PROGRESS=1 or on a
pipe; each prints one summary line on stdout, which ends with what it moved and how fast
(issue 36: the line used to come twice, once on each stream, and clone's three times). The real
CLI, a real `mint registry serve` and, for pull, olah serving a hub repo."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from tqdm import tqdm

from mint import api
from mint.cli import run_in_process
from mint.progress import Progress, moved, size

from conftest import Result
from support.hubserver import HubServer
from support.registry import create_token, start_registry

SUMMARY = re.compile(r"(?P<n>\d+) (?:blob|file)s?, (?P<size>\S+ \S+) in \d+\.\d s")


class Setup:
    """A registry (SQLite) with a writer's token in MINT_TOKEN, and a local repository with
    line chat committed twice: a1, then a2."""

    def __init__(self, tmp: Path, models, monkeypatch):
        self.tmp = tmp
        registry, _ = api.init(tmp / "registry")
        api.base_add(registry, "tiny-llama", models["base"])
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp / "config"))
        monkeypatch.setenv("MINT_USER", "laptop-user")
        monkeypatch.setenv("MINT_TOKEN", create_token(registry.root, "wanda", "writer"))
        registry.close()
        self.server = start_registry(tmp / "registry")
        self.url = self.server.url
        self.work, _ = api.init(tmp / "work")
        api.base_add(self.work, "tiny-llama", models["base"])
        self.first = api.commit(self.work, "chat", models["a1"], "one", author="x").id
        self.second = api.commit(self.work, "chat", models["a2"], "two", author="x").id

    def blobs(self, *commits: str, besides: tuple[str, ...] = ()) -> dict[str, int]:
        """Blob id -> size of COMMITS' files, less those of BESIDES."""
        have = {f.sha256 for c in besides for f in api.show(self.work, c).files.values()}
        return {
            f.sha256: f.size
            for c in commits
            for f in api.show(self.work, c).files.values()
            if f.sha256 not in have
        }

    def mint(self, *args) -> Result:
        return Result(*run_in_process([str(a) for a in args]))

    def local(self, *args) -> Result:
        return self.mint("--repo", self.work.root, *args)


@pytest.fixture
def setup(tmp_path, models, monkeypatch):
    for var in ("MINT_NO_PROGRESS", "HF_HUB_DISABLE_PROGRESS_BARS", "MINT_REPO"):
        monkeypatch.delenv(var, raising=False)
    s = Setup(tmp_path, models, monkeypatch)
    yield s
    s.server.stop()
    s.work.close()


def summary(result: Result, what: str, n: int, nbytes: int) -> None:
    """RESULT succeeded with nothing on stderr and its summary first on stdout, said once: the
    line starts with WHAT and ends with N items and NBYTES moved."""
    assert result.code == 0, result
    assert result.err == "", result
    first = result.out.splitlines()[0]
    found = SUMMARY.search(first)
    assert first.startswith(what) and found, result.out
    assert (int(found["n"]), found["size"]) == (n, size(nbytes)), first
    assert len(SUMMARY.findall(result.out)) == 1, result.out


def tree_bytes(folder: Path, names: set[str] | None = None) -> tuple[int, int]:
    """(files, bytes) under FOLDER (only those named NAMES, when given)."""
    files = [p for p in folder.rglob("*") if p.is_file() and (names is None or p.name in names)]
    return len(files), sum(p.stat().st_size for p in files)


# --- not a terminal: one summary line per transfer ----------------------------------------


def test_push_clone_fetch_each_print_one_line_with_the_bytes_they_moved(setup):
    s = setup
    pushed = s.local("push", s.url, f"chat@{s.first[:12]}")
    sent = s.blobs(s.first)
    summary(pushed, "pushed", len(sent), sum(sent.values()))
    assert "1 commit," in pushed.out.splitlines()[0]
    cloned = s.mint("clone", s.url, s.tmp / "clone")
    summary(cloned, "cloned", len(sent), sum(sent.values()))
    # the second push and the fetch move only what the other side lacks
    pushed = s.local("push", s.url, "chat")
    new = s.blobs(s.second, besides=(s.first,))
    assert 0 < len(new) < len(s.blobs(s.second))
    summary(pushed, "pushed", len(new), sum(new.values()))
    fetched = s.mint("--repo", s.tmp / "clone", "fetch", "origin")
    summary(fetched, "fetched", len(new), sum(new.values()))
    again = s.mint("--repo", s.tmp / "clone", "fetch", "origin")
    summary(again, "fetched", 0, 0)


def test_checkout_and_export_count_every_file_they_write(setup):
    s = setup
    local = s.local("checkout", "chat", s.tmp / "co")
    summary(local, "checked out", *tree_bytes(s.tmp / "co"))
    assert s.local("push", s.url, "chat", "-q").code == 0
    remote = s.mint("--repo", s.url, "checkout", "chat", s.tmp / "co-remote")
    summary(remote, "checked out", *tree_bytes(s.tmp / "co-remote"))
    exported = s.local("export", "chat", s.tmp / "ex", "--format", "vllm")
    files = set(api.show(s.work, "chat").files)  # not what vLLM gets beside them
    assert files and files != {p.name for p in (s.tmp / "ex").iterdir()}
    summary(exported, "exported", *tree_bytes(s.tmp / "ex", files))


def test_quiet_and_mint_no_progress_print_nothing(setup, monkeypatch):
    s = setup
    for result in (
        s.local("push", s.url, "chat", "--quiet"),
        s.mint("clone", s.url, s.tmp / "clone", "-q"),
        s.local("checkout", "chat", s.tmp / "co", "-q"),
        s.local("export", "chat", s.tmp / "ex", "--quiet"),
    ):
        assert result.code == 0 and result.err == "" and result.out, result
    monkeypatch.setenv("MINT_NO_PROGRESS", "1")
    checkout = s.local("checkout", "chat", s.tmp / "co2")
    assert checkout.code == 0 and checkout.err == "" and "checked out" in checkout.out


def test_json_keeps_stdout_one_document_and_stderr_empty(setup):
    s = setup
    pushed = s.local("push", s.url, "chat", "--json")
    assert pushed.code == 0 and pushed.err == "", pushed
    assert pushed.json()["bytes"] == sum(s.blobs(s.first, s.second).values())
    checkout = s.local("checkout", "chat", s.tmp / "co", "--json")
    assert checkout.code == 0 and checkout.err == "", checkout
    assert checkout.json()["bytes"] == tree_bytes(s.tmp / "co")[1]


def test_a_failed_transfer_prints_its_error_alone(setup):
    s = setup
    (s.tmp / "full").mkdir()
    (s.tmp / "full" / "x").write_text("x")
    failed = s.local("checkout", "chat", s.tmp / "full")
    assert failed.code != 0 and len(failed.err.splitlines()) == 1, failed
    assert not failed.err.startswith("checked out")


# --- a terminal: a tqdm bar ----------------------------------------------------------------


def on_tty(argv: list, env: dict | None = None, timeout: float = 120) -> tuple[int, str, str]:
    """Run ARGV with its stderr on a terminal and its stdout on a pipe: (code, out, terminal)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    proc = subprocess.Popen(
        [str(a) for a in argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        env={**os.environ, **(env or {})},
    )
    os.close(slave)
    chunks = []
    while select.select([master], [], [], timeout)[0]:
        try:
            data = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    out = proc.stdout.read().decode()
    return proc.wait(timeout=30), out, b"".join(chunks).decode(errors="replace")


def cli(*args) -> list:
    return [sys.executable, "-m", "mint", *args]


def test_a_terminal_gets_a_bar_with_the_total_bytes_and_stdout_stays_clean(setup):
    s = setup
    total = sum(s.blobs(s.first, s.second).values())
    shown = tqdm.format_sizeof(total)  # as the bar writes it: "43.3k/43.3k"
    code, out, terminal = on_tty(cli("--repo", s.work.root, "push", s.url, "chat", "--json"))
    assert code == 0, terminal
    assert json.loads(out)["bytes"] == total  # the bar never reaches stdout
    assert "100%" in terminal and f"{shown}/{shown}" in terminal, terminal
    assert not SUMMARY.search(terminal)
    # HF_HUB_DISABLE_PROGRESS_BARS: no bar; the summary line on stdout says what moved
    env = {"HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    code, out, terminal = on_tty(cli("--repo", s.work.root, "checkout", "chat", s.tmp / "co"), env)
    assert code == 0 and out.startswith("checked out ") and SUMMARY.search(out), (out, terminal)
    assert terminal.strip() == "", terminal
    code, out, terminal = on_tty(cli("clone", s.url, s.tmp / "clone", "-q"))
    assert code == 0 and "cloned" in out and terminal == "", terminal


# --- pull from a hub -------------------------------------------------------------------------


def test_pull_counts_the_files_it_downloads_and_nothing_held_already(setup, models, monkeypatch):
    s = setup
    with HubServer(s.tmp / "hub") as hub:
        hub.repo("org/ad").commit({"": models["a1"], "README.md": "# ad\n"}, "first")
        hub.start("org/ad")
        monkeypatch.setenv("HF_HOME", str(s.tmp / "hf"))
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HF_HUB_CACHE"):
            monkeypatch.delenv(var, raising=False)
        pulled = s.local("pull", "hf://org/ad")
        files = api.show(s.work, "ad").files.values()
        summary(pulled, "pulled", len(files), sum(f.size for f in files))
        summary(s.local("pull", "hf://org/ad"), "pulled", 0, 0)  # held: nothing comes down
        assert s.local("pull", "hf://org/ad", "--as", "ad2", "-q").err == ""


# --- the library prints nothing of its own ----------------------------------------------------


def test_the_api_is_silent_unless_given_a_progress(setup, capfd):
    s = setup
    seen: list[tuple[int, int]] = []
    api.checkout(s.work, "chat", s.tmp / "co")
    r = api.checkout(
        s.work, "chat", s.tmp / "co2", progress=Progress(lambda n, t: seen.append((n, t)))
    )
    assert capfd.readouterr() == ("", "")
    assert seen and seen[-1] == (r.bytes, r.bytes)
    assert [n for n, _ in seen] == sorted(n for n, _ in seen)


def test_the_summary_line_reads_as_the_issue_asks():
    progress = Progress()
    progress.items, progress.bytes, progress.seconds = 3, 80_100_000, 1.2
    assert moved(progress, "push") == "3 blobs, 80.1 MB in 1.2 s (66.8 MB/s)"
    progress.items, progress.bytes, progress.seconds = 1, 999, 0.0
    assert moved(progress, "checkout") == "1 file, 999 B in 0.0 s"
    assert [size(n) for n in (0, 1000, 1234, 999_960, 5 * 10**12)] == [
        "0 B",
        "1.0 kB",
        "1.2 kB",
        "1.0 MB",
        "5.0 TB",
    ]
