"""The fork server the tests start registries and `mint serve` from (support.forkserver) runs
`mint` as `python -m mint` would: the arguments, environment, folder and log it is given, its
exit code (a signal's as negative), and it is this process's child.
"""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from mint import api

from support import forkserver

pytestmark = pytest.mark.one_database(
    "sqlite", "a process's start, not the database: test_commit and test_remote run both"
)


def test_a_forked_mint_gets_its_arguments_environment_folder_and_log(mint, repo, models, tmp_path):
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    env = {**os.environ, "MINT_USER": "forked-user"}
    log = tmp_path / "commit.log"
    argv = ["--repo", repo.root, "commit", "chat", models["a1"], "-m", "from a fork"]
    done = forkserver.start_mint(argv, warm="registry", env=env, log=log, cwd=tmp_path)
    assert done.wait(120) == 0, log.read_text()
    (entry,) = api.log(repo, "chat")
    assert (entry.author, entry.message) == ("forked-user", "from a fork")
    assert log.read_text().strip() == entry.id  # stdout into the log

    # a relative path is read from the folder given; a failure is its exit code and one line
    log = tmp_path / "init.log"
    done = forkserver.start_mint(["init", "here"], warm="registry", env=env, log=log, cwd=tmp_path)
    assert done.wait(120) == 0 and (tmp_path / "here" / ".mint").is_dir(), log.read_text()
    argv = ["--repo", "here", "show", "nosuch"]
    again = forkserver.start_mint(argv, warm="registry", env=env, log=log, cwd=tmp_path)
    assert again.wait(120) == 1
    lines = log.read_text().strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], lines


def test_a_forked_server_is_this_process_s_child_and_ends_by_its_signal(repo, tmp_path):
    argv = ["--repo", repo.root, "registry", "serve", "--port", "0"]
    served = forkserver.start_mint(argv, warm="registry", env=dict(os.environ), log=tmp_path / "l")
    assert served.poll() is None
    os.kill(served.pid, signal.SIGKILL)
    assert served.wait(60) == -signal.SIGKILL  # waited for here: this process's child
    with pytest.raises(ChildProcessError):
        os.waitpid(served.pid, os.WNOHANG)  # and reaped


def test_without_the_fork_server_a_server_is_a_fresh_interpreter(monkeypatch, tmp_path):
    monkeypatch.setenv("MINT_TEST_FORK", "0")
    plain = forkserver.spawn(
        ["--version"], warm="registry", env=dict(os.environ), log=tmp_path / "v"
    )
    assert isinstance(plain, subprocess.Popen) and plain.wait(120) == 0
    assert plain.args[1:3] == ["-m", "mint"] and (tmp_path / "v").read_text().strip()
