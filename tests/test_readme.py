"""README.md's contract example runs as written, line by line, on a repository of two commits,
on SQLite and on PostgreSQL, and leaves the moves it promises (tests/test_readme_blocks.py runs
every block of the README in order, as a shell would, on the default SQLite)."""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

from mint import api

README = Path(__file__).resolve().parents[1] / "README.md"


def section(title: str) -> str:
    text = README.read_text()
    start = text.index(title)
    return text[start : text.index("\n### ", start + 1)]


def test_contract_example_runs_as_written(mint, repo, models, tmp_path, monkeypatch):
    text = section("### Evaluation contracts and promotion")
    toml = re.search(r"```toml\n# production.toml\n(.*?)```", text, re.S).group(1)
    commands = re.search(r"```sh\n(.*?)```", text, re.S).group(1).strip().splitlines()
    (tmp_path / "production.toml").write_text(toml)
    monkeypatch.chdir(tmp_path)
    # as after `source .venv/bin/activate`: `python` is the one mint is installed in
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    assert mint("commit", "chat", models["a1"], "-m", "one").code == 0
    assert mint("commit", "chat", models["a3"], "-m", "two").code == 0
    for line in commands:
        argv = shlex.split(line, comments=True)
        assert argv[0] == "mint", line
        r = mint(*argv[1:])
        assert r.code == 0, (line, r)
    moves = api.history(repo, "chat@production")
    assert [m.action for m in moves] == ["promote", "force", "rollback"]
    assert moves[-1].to == api.resolve(repo, "chat")
    evaluation = api.gate(repo, "chat", "production")
    assert evaluation.ok and evaluation.contracts == ["production@v1"]
