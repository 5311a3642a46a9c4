"""`python -m mint.examples.demo --keep DIR` leaves a repository a newcomer can serve: the
demo's set committed with its tags and channels, its base registered, the files beside it.

The demo runs once, as a user runs it; then the real `mint` command reads the folder it left
(from inside it, as after `cd DIR`), evaluates the production set's routing without being told
where the base is, and `mint serve` answers a chat from it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mint import api
from mint.examples import train

from support.serving import start_serve

pytestmark = pytest.mark.xdist_group("demo-keep")
MINT = Path(sys.executable).parent / "mint"


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MINT_")}


@pytest.fixture(scope="module")
def kept(tmp_path_factory) -> Path:
    """The folder `python -m mint.examples.demo --keep` left (run once for the module)."""
    folder = tmp_path_factory.mktemp("demo-keep") / "macaron-demo"
    proc = subprocess.run(
        [sys.executable, "-m", "mint.examples.demo", "--keep", str(folder)],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=folder.parent,
        timeout=1500,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    assert f"cd {folder}" in proc.stdout
    return folder


def mint_in(folder: Path, *args: str) -> str:
    """`mint ARGS` run in FOLDER (it finds the repository there); its standard output."""
    done = subprocess.run(
        [str(MINT), *args], capture_output=True, text=True, cwd=folder, env=clean_env()
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


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
