"""Every command block of README.md runs as written, in order, as one shell session would.

The blocks run one after another in an empty folder, with the venv's `mint` and `python` first
on the PATH: each ```sh block is one `bash` run (`set -e -o pipefail`) that starts in the folder
and with the variables the block before it ended with; a ```toml block whose first line names a
file (`# production.toml`) is written to that file first, as a reader would save it. A block
that follows `<!-- not run: WHY -->` is not run, and only a few may be. The one of those that
starts `mint registry serve` is started here instead, by `support.registry`, over the folder the
shell is in, and later blocks reach it where the README says `http://registry:8080`.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from support.registry import running_registry

README = Path(__file__).resolve().parents[1] / "README.md"
REGISTRY_URL = "http://registry:8080"
MOST_NOT_RUN = 3  # make, and the two servers that run until stopped
BLOCK = re.compile(
    r"^(?:<!-- not run: (?P<why>[^\n]*?) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)^```$", re.M | re.S
)
NAMED_FILE = re.compile(r"# ([\w./-]+\.toml)\b")
STATE_KEYS_DROPPED = ("_", "PWD", "OLDPWD", "SHLVL")


@dataclass(frozen=True)
class Block:
    """One command block: a script for bash, or why it is not run."""

    script: str
    not_run: str | None = None


def readme_blocks(markdown: str) -> list[Block]:
    """The ```sh blocks and the ```toml blocks that name their file, in order."""
    blocks = []
    for m in BLOCK.finditer(markdown):
        body, why = m.group("body"), m.group("why")
        if m.group("lang") == "sh":
            blocks.append(Block(body, why))
        elif m.group("lang") == "toml" and (name := NAMED_FILE.match(body)):
            blocks.append(Block(f"cat > {name.group(1)} <<'EOF'\n{body}EOF\n", why))
    return blocks


@dataclass
class Shell:
    """The folder and the variables one block leaves for the next."""

    cwd: Path
    env: dict[str, str]
    state: Path

    def run(self, script: str) -> subprocess.CompletedProcess:
        """SCRIPT in bash (-e, pipefail; every assignment exported, so that it carries over)."""
        tail = f'\npwd > "{self.state}/cwd"\nenv -0 > "{self.state}/env"\n'
        done = subprocess.run(
            ["bash", "-c", "set -eao pipefail\n" + script + tail],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if done.returncode == 0:
            self.cwd = Path((self.state / "cwd").read_text().strip())
            pairs = (self.state / "env").read_text().split("\0")
            self.env = dict(p.split("=", 1) for p in pairs if "=" in p)
            for key in STATE_KEYS_DROPPED:
                self.env.pop(key, None)
        return done


def new_shell(tmp_path: Path) -> Shell:
    """An empty folder; mint's venv first on the PATH; HOME and the XDG folders in tmp_path,
    so that `mint login` keeps its tokens there; no MINT_ or HF_ settings from outside."""
    home, state, work = tmp_path / "home", tmp_path / "state", tmp_path / "work"
    for folder in (home, state, work):
        folder.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MINT_", "HF_"))}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / "config"))
    env["XDG_CACHE_HOME"] = str(home / "cache")
    return Shell(work, env, state)


def run_blocks(blocks: list[Block], shell: Shell) -> list[tuple[Block, int, str]]:
    """Run BLOCKS in order until one fails: (block, exit status, output) for each one run."""
    ran, url = [], REGISTRY_URL
    with contextlib.ExitStack() as servers:
        for block in blocks:
            if block.not_run is not None:
                if "mint registry serve" in block.script:
                    url = servers.enter_context(running_registry(shell.cwd)).url
                continue
            done = shell.run(block.script.replace(REGISTRY_URL, url))
            ran.append((block, done.returncode, done.stdout + done.stderr))
            if done.returncode != 0:
                break
    return ran


def failed(ran: list[tuple[Block, int, str]]) -> str:
    block, code, output = ran[-1]
    return f"exit status {code} in the block:\n{block.script}\n--- output:\n{output[-4000:]}"


def test_every_command_block_runs_in_order(tmp_path):
    blocks = readme_blocks(README.read_text())
    ran = run_blocks(blocks, new_shell(tmp_path))
    assert ran[-1][1] == 0, failed(ran)
    assert len(ran) == len([b for b in blocks if b.not_run is None])
    work = tmp_path / "work"
    # what the blocks leave: the playground's checkout, the demo's set, the registry's clone
    assert (work / "play" / "serve" / "chat" / "adapter_config.json").is_file()
    assert (work / "macaron-demo" / "vllm-set" / "lora-modules.json").is_file()
    assert (work / "work" / ".mint").is_dir()


def test_only_a_few_blocks_are_not_run_and_each_says_why():
    blocks = readme_blocks(README.read_text())
    not_run = [b for b in blocks if b.not_run is not None]
    assert 0 < len(not_run) <= MOST_NOT_RUN, [b.not_run for b in not_run]
    assert all(len(b.not_run.split()) >= 3 for b in not_run), [b.not_run for b in not_run]
    assert sum("mint registry serve" in b.script for b in not_run) == 1
    # every fence of the README is one of the blocks read (or a toml/json/python sample)
    fences = re.findall(r"^```(\w*)$", README.read_text(), re.M)
    assert fences.count("sh") == sum(not b.script.startswith("cat > ") for b in blocks)


def test_a_block_out_of_order_fails(tmp_path):
    """The check can fail: with `mint tag v1 chat` after `mint show chat@v1` (as the README had
    it once), the tour stops at the show."""
    text = README.read_text()
    show, tag = "mint show chat@v1", "mint tag v1 chat"
    start, end = text.index("### Commit, compare, tag"), text.index("### A contract")
    lines = text[start:end].splitlines(keepends=True)
    i = next(n for n, line in enumerate(lines) if line.startswith(tag))
    j = next(n for n, line in enumerate(lines) if line.startswith(show))
    assert i < j
    lines[i], lines[j] = lines[j], lines[i]
    head = text[:start] + "".join(lines)
    ran = run_blocks(readme_blocks(head), new_shell(tmp_path))
    block, code, output = ran[-1]
    assert code != 0 and show in block.script, failed(ran)
    assert "v1" in output
    assert len(ran) == 2  # the playground ran; the block with the show failed
