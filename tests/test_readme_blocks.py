"""Every command block of README.md runs as written, in order, as one shell session would.

The blocks run one after another in an empty folder, with the venv's `mint` and `python` first
on the PATH: each ```sh block is one `bash` run (`set -e -o pipefail`) that starts in the folder
and with the variables the block before it ended with; a ```toml block whose first line names a
file (`# production.toml`) is written to that file first, as a reader would save it. A block
that follows `<!-- not run: WHY -->` is not run, and only a few may be. The one of those that
starts `mint registry serve` is started here instead, by `support.registry`, over the folder the
shell is in, and later blocks reach it where the README says `http://registry:8080`.

The tour runs once for the module. Its block `python -m mint.examples.demo --keep
macaron-demo` is the demo as a user runs it: the folder it leaves is copied as the demo left
it, before the next block changes it, and read by the real `mint` from inside (as after
`cd DIR`): its set with tags and channels, routing without being told where the base is,
and `mint serve` answering a chat from it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from mint import api
from mint.examples import train

from support.registry import running_registry
from support.serving import start_serve

pytestmark = pytest.mark.xdist_group("readme")
MINT = Path(sys.executable).parent / "mint"
DEMO = "python -m mint.examples.demo --keep"

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


def run_blocks(blocks: list[Block], shell: Shell, after=None) -> list[tuple[Block, int, str]]:
    """Run BLOCKS in order until one fails: (block, exit status, output) for each one run;
    AFTER(block, shell), when given, after each block that ran."""
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
            if after is not None:
                after(block, shell)
    return ran


def failed(ran: list[tuple[Block, int, str]]) -> str:
    block, code, output = ran[-1]
    return f"exit status {code} in the block:\n{block.script}\n--- output:\n{output[-4000:]}"


@dataclass(frozen=True)
class Tour:
    blocks: list[Block]
    ran: list[tuple[Block, int, str]]
    work: Path  # the folder the tour started in
    kept: Path  # the demo's folder as `demo --keep` left it


@pytest.fixture(scope="module")
def tour(tmp_path_factory) -> Tour:
    """The README's blocks, run once in order; the demo's folder copied as the demo left it."""
    root = tmp_path_factory.mktemp("readme")
    kept = root / "macaron-demo"

    def keep_the_demo(block: Block, shell: Shell) -> None:
        if DEMO in block.script:  # the block ends in the folder (`cd macaron-demo`)
            shutil.copytree(shell.cwd, kept, symlinks=True)

    blocks = readme_blocks(README.read_text())
    ran = run_blocks(blocks, new_shell(root), after=keep_the_demo)
    return Tour(blocks, ran, root / "work", kept)


def test_every_command_block_runs_in_order(tour):
    ran = tour.ran
    assert ran[-1][1] == 0, failed(ran)
    assert len(ran) == len([b for b in tour.blocks if b.not_run is None])
    work = tour.work
    # what the blocks leave: the playground's checkout, the demo's set, the registry's clone
    assert (work / "play" / "serve" / "chat" / "adapter_config.json").is_file()
    assert (work / "macaron-demo" / "vllm-set" / "lora-modules.json").is_file()
    assert (work / "work" / ".mint").is_dir()
    assert [DEMO in b.script for b, _, _ in ran].count(True) == 1 and tour.kept.is_dir()


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


# --- the folder `python -m mint.examples.demo --keep DIR` leaves -------------------------------


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MINT_")}


def mint_in(folder: Path, *args: str) -> str:
    """`mint ARGS` run in FOLDER (it finds the repository there); its standard output."""
    done = subprocess.run(
        [str(MINT), *args], capture_output=True, text=True, cwd=folder, env=clean_env()
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def kept(tour) -> Path:
    assert tour.ran[-1][1] == 0, failed(tour.ran)
    return tour.kept


def test_the_set_its_tags_and_channels_are_as_the_demo_left_them(kept):
    status = {s["name"]: s for s in json.loads(mint_in(kept, "status", "--json"))}
    assert set(status) == {"router", "chat", "agent", "coding", "ui", "macaron"}
    production = json.loads(mint_in(kept, "show", "macaron@production", "--json"))
    assert status["macaron"]["channels"] == {"production": production["id"]}
    repo = api.open_repo(kept)
    try:
        roles = {m.role: m.commit_id for m in api.show(repo, production["id"]).members}
        assert roles["router"] == api.resolve(repo, "router@v1")
        assert api.resolve(repo, "router@v2") == status["router"]["head"]
        for label in ("chat", "agent", "coding", "ui"):
            assert api.resolve(repo, f"{label}@v1") == status[label]["head"]
        moves = [m.action for m in api.history(repo, "macaron@production")]
        assert moves == ["promote", "force", "rollback"]
        assert [c.name for c in api.contract_ls(repo)] == ["production"]
        [base] = api.base_ls(repo)
        assert base.name == "tiny-llama" and (Path(base.source) / "config.json").is_file()
    finally:
        repo.close()
    for name in ("macaron/mol.toml", "macaron/route.md", "train/heldout.jsonl", "production.toml"):
        assert (kept / name).is_file(), name


def test_the_production_set_routes_with_the_registered_base(kept, tmp_path):
    data = tmp_path / "some.jsonl"
    data.write_text("".join((kept / "train" / "heldout.jsonl").read_text().splitlines(True)[:20]))
    args = ("route-eval", "macaron@production", "--data", str(data), "--json")
    result = json.loads(mint_in(kept, *args))
    assert result["n"] == 20 and result["accuracy"] == 1.0, result


def test_mint_serve_answers_from_the_kept_set(kept, tmp_path):
    base = api.open_repo(kept)
    try:
        [registered] = api.base_ls(base)
        holder = api.resolve(base, "macaron@production")
    finally:
        base.close()
    served = start_serve(str(kept), registered.source, tmp_path / "serve")
    try:
        with served.client() as client:
            body = {"model": "macaron", "messages": [{"role": "user", "content": "fix the bug"}]}
            answer = client.post("/v1/chat/completions", json=body).json()
    finally:
        served.stop()
    assert answer["mint"]["set"] == holder and answer["mint"]["route"] == "coding"
    assert answer["choices"][0]["message"]["content"] == train.ANSWERS["coding"]


def test_keep_refuses_a_folder_that_is_not_empty(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    proc = subprocess.run(
        [sys.executable, "-m", "mint.examples.demo", "--keep", str(tmp_path)],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=300,
    )
    assert proc.returncode == 1 and "not an empty folder" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_the_kept_mol_toml_is_the_readmes(kept):
    """The README shows the set's mol.toml as the demo leaves it (a reader saves the block over
    it): the two are the same file, byte for byte (issue 36: they differed)."""
    import re

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = re.search(r"```toml\n# macaron/mol.toml\n(.*?)```", readme, re.S).group(1)
    assert (kept / "macaron" / "mol.toml").read_text() == block
