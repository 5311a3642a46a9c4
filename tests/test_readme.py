"""README.md's contract example runs as written, line by line, on a repository of two commits,
on SQLite and on PostgreSQL, and leaves the moves it promises (tests/test_readme_blocks.py runs
every block of the README in order, as a shell would, on the default SQLite). The README fits
on a few screens, with one table of figures; the tiny example prints the README's first
commands, word for word."""

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
    text = section("### A contract, and the gate that enforces it")
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


def test_the_readme_fits_with_one_table_of_a_dozen_rows():
    """Issue 36: 480 lines, half of them a ledger of figures from several machines. Now a page
    that reads in a few screens, whose one table of figures has at most twelve rows (the
    ledger is in docs/performance.md)."""
    text = README.read_text()
    assert len(text.splitlines()) <= 230, len(text.splitlines())
    tables = re.findall(r"(?:^\|.*\|\n)+", text, re.M)
    assert len(tables) == 1, tables
    rows = tables[0].strip().splitlines()[2:]  # less the header and its rule
    assert 0 < len(rows) <= 12, rows


def test_the_tiny_example_prints_the_readmes_first_commands(tmp_path, capsys):
    """`python -m mint.examples.tiny play` ends with the commands to try: the README's first
    block, after the line that runs it, word for word (they once differed)."""
    from mint.examples import tiny

    first = re.search(
        r"```sh\n(python -m mint\.examples\.tiny play.*?)```", README.read_text(), re.S
    )
    readme = [shlex.split(line, comments=True) for line in first.group(1).splitlines()[1:]]
    assert tiny.main([str(tmp_path / "play")]) == 0
    printed = capsys.readouterr().out.split("Try mint on them:\n", 1)[1]
    commands = [shlex.split(line) for line in printed.splitlines() if line.strip()]
    commands[0] = ["cd", "play"]  # the folder it was given: the README's is play
    assert commands == [argv for argv in readme if argv], (commands, readme)


def test_every_install_line_names_mint_lora():
    """The README installs mint from a checkout or as mint-lora, never as PyPI's `mint`."""
    text = README.read_text()
    assert "pip install ." in text and "mint-lora" in text
    assert not re.search(r"pip install\s+['\"]?mint(\[|['\"\s]|$)", text, re.M)
