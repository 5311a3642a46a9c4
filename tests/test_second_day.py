"""A newcomer's second day (issue 36): the rough edges a team hits after the first run, each
through the real CLI, on SQLite and on PostgreSQL where it touches the database.

- the evaluator's `python` is the interpreter running mint (item 4);
- `--force` says which of the gate's checks it overrode (item 6);
- `history` keeps a long reason to one cell; `show` has one layout (item 8);
- messages that help more (item 10): a checkout into a folder that is not empty, and
  `checkout --force` (which replaces an earlier checkout, and nothing else); a registry's
  address given without http://; an unknown base; `LINE~N` past the first commit; a tensor
  whose shape changed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mint import api

from conftest import one_line_error, snapshot

pytestmark = pytest.mark.one_database(
    "sqlite",
    "the subject is what the CLI prints; test_log_and_status runs log and status on both"
    " databases",
)


MINT = Path(sys.executable).parent / "mint"
CONTRACT = """name = "production"
channel = "production"
requires = ["staging"]
approvals = 1
[[metric]]
name = "finite"
min = 1.0
[evaluator]
command = ["python", "-m", "mint.examples.evaluate", "{checkout}"]
"""


@pytest.fixture
def based(mint, models):
    """The repository with tiny-llama registered, and `chat` committed twice (a1, then a2)."""
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    assert mint("commit", "chat", models["a1"], "-m", "one").code == 0
    assert mint("commit", "chat", models["a2"], "-m", "two").code == 0
    return mint


# --- item 4: the evaluator's python --------------------------------------------------------


def test_the_evaluators_python_is_the_interpreter_running_mint(based, repo, tmp_path):
    """mint run by its full path from a virtual environment (as cron and CI run it), with a
    PATH on which `python` is another interpreter or none: the evaluator runs in mint's own
    interpreter, finds mint's packages, and its result is recorded. Before, it failed with
    `No module named 'mint'` (or could not start)."""
    contract = tmp_path / "production.toml"
    contract.write_text(CONTRACT)
    assert based("contract", "add", contract).code == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINT_")}
    env["PATH"] = "/usr/bin:/bin"  # no venv: `python` here is the system's, without mint
    done = subprocess.run(
        [str(MINT), "--repo", str(repo.root), "eval", "chat", "--contract", "production"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    [evaluation] = api.evaluations_of(repo, api.resolve(repo, "chat"))
    assert evaluation.metrics == {"finite": 1.0} and evaluation.source == "evaluator"
    assert evaluation.evaluator["command"][0] == "python"  # recorded as the contract wrote it


# --- item 6: --force says what it overrode -------------------------------------------------


def test_force_prints_the_failed_checks_it_overrode(based, repo, tmp_path):
    contract = tmp_path / "production.toml"
    contract.write_text(CONTRACT)
    assert based("contract", "add", contract).code == 0
    forced = based("promote", "chat~1", "--to", "production", "--force", "--reason", "hotfix")
    assert forced.code == 0, forced
    out = forced.out
    assert "(force)" in out and "forced past 4 failed checks of the gate:" in out, out
    rows = {line.split("  ")[0] for line in out.splitlines() if line.endswith("FAIL")}
    expected = {"evaluation under production v1", "finite", "held chat@staging", "approvals"}
    assert rows == expected, out
    again = based("promote", "chat", "--to", "production", "--force", "--reason", "x", "--json")
    assert again.code == 0 and again.json()["action"] == "force"
    assert {c["check"] for c in again.json()["overridden"]} == expected
    assert all(not c["ok"] for c in again.json()["overridden"])
    # a gate that lets the commit through leaves nothing overridden, and nothing is said
    passed = based("promote", "chat", "--to", "staging", "--force", "--reason", "x")
    assert passed.code == 0 and "(promote)" in passed.out and "forced past" not in passed.out


# --- item 8: history's reason, show's layout -------------------------------------------------


def test_history_keeps_a_long_reason_to_one_cell(based):
    reason = "the router misroutes coding requests to the ui expert; " * 5
    assert based("promote", "chat", "--to", "production", "--force", "--reason", reason).code == 0
    shown = based("history", "chat@production")
    row = shown.out.splitlines()[-1]
    assert len(row) < 200 and row.endswith("…") and "misroutes" in row, shown.out
    assert "--json" in shown.err  # where the whole reason is
    assert based("history", "chat@production", "--json").json()[-1]["reason"] == reason


def test_show_is_one_layout_of_labels_and_values(based):
    """Every line above the message is a label in the first column and its value in the
    second, lists (meta, files, tensors) continuing in the second column; the message is below,
    indented. Before, key: value lines, then unlabelled rows of files and tensors."""
    out = based("show", "chat", "--tensors").out
    head, _, message = out.partition("\n\n")
    lines = head.splitlines()
    column = len(re.match(r"\S+\s+", lines[0]).group(0))
    for line in lines:
        label, value = line[:column], line[column:]
        assert value and not value[0].isspace(), line
        assert label.strip() == "" or re.fullmatch(r"[a-z.]+ +", label), line
    labels = [line.split()[0] for line in lines if not line[0].isspace()]
    assert labels[:6] == ["commit", "parents", "author", "date", "base", "tags"]
    assert {"peft", "files", "tensors"} <= set(labels)
    assert message.strip() == "two"


# --- item 10: checkout into a folder that is not empty, and --force -------------------------


def test_checkout_into_a_folder_that_is_not_empty_says_what_to_do(based, tmp_path):
    folder = tmp_path / "serve"
    assert based("checkout", "chat~1", folder).code == 0
    line = one_line_error(based("checkout", "chat", folder), "not an empty folder")
    assert "--force" in line and "earlier checkout" in line


def test_checkout_force_replaces_an_earlier_checkout_of_the_line(based, repo, tmp_path):
    folder = tmp_path / "serve"
    assert based("checkout", "chat~1", folder).code == 0
    replaced = based("checkout", "chat", folder, "--force")
    assert replaced.code == 0, replaced
    head, first = api.resolve(repo, "chat"), api.resolve(repo, "chat~1")
    assert f"replacing the checkout of {first[:12]}" in replaced.out
    assert _files(folder) == _files(Path(api.checkout(repo, "chat", tmp_path / "fresh").path))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".serve")]  # no leftovers
    again = json.loads(based("checkout", "chat~1", folder, "--force", "--json").out)
    assert again["replaced"] == head and again["id"] == first


def test_checkout_force_never_replaces_any_other_folder(based, repo, models, tmp_path):
    """A folder of one's own, a checkout edited since, a checkout with a file added, a
    checkout of another line: each refused in one line, and left exactly as it was."""
    own = tmp_path / "own"
    own.mkdir()
    (own / "notes.txt").write_text("mine")
    edited = Path(api.checkout(repo, "chat", tmp_path / "edited").path)
    (edited / "README.md").write_text("my notes on this adapter")
    added = Path(api.checkout(repo, "chat", tmp_path / "added").path)
    (added / "extra.txt").write_text("x")
    assert based("commit", "other", models["a3"], "-m", "another line").code == 0
    other = Path(api.checkout(repo, "other", tmp_path / "other").path)
    before = snapshot(repo)
    for folder in (own, edited, added, other):
        files = _files(folder)
        line = one_line_error(based("checkout", "chat", folder, "--force"), "holds no checkout")
        assert "chat" in line and "move that one away" in line
        assert _files(folder) == files
    assert snapshot(repo) == before


def test_checkout_force_replaces_an_earlier_checkout_of_a_set(mint, repo, models, tmp_path):
    from support.loop import build_set

    ids = build_set(repo, models, tmp_path)
    folder = tmp_path / "served"
    assert mint("checkout", "macaron", folder).code == 0
    api.commit(repo, "chat", models["a1"], "chat v2", author="t")
    v2 = api.set_commit(repo, ids["folder"] / "mol.toml", "v2", author="t").id
    replaced = mint("checkout", "macaron", folder, "--force")
    assert replaced.code == 0 and f"checkout of {ids['set'][:12]}" in replaced.out, replaced
    fresh = api.checkout(repo, v2, tmp_path / "fresh")
    assert _files(folder) == _files(Path(fresh.path))
    # the set's own source folder (a mol.toml of revisions, not ids) is never one
    source = _files(ids["folder"])
    one_line_error(mint("checkout", "macaron", ids["folder"], "--force"), "holds no checkout")
    assert _files(ids["folder"]) == source


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


# --- item 10: the other messages ------------------------------------------------------------


@pytest.mark.parametrize("given", ["127.0.0.1:8080", "localhost:8080/team", "[::1]:9000"])
def test_a_registry_address_without_its_scheme_gets_the_url_suggested(given, tmp_path):
    from mint.cli import run_in_process

    code, _, err = run_in_process(["--repo", given, "status"])
    assert code == 1 and f"http://{given}" in err and len(err.strip().splitlines()) == 1, err
    code, _, err = run_in_process(["--repo", str(tmp_path / "nowhere"), "status"])
    assert code == 1 and "http://" not in err and "mint init" in err


def test_an_unknown_base_says_which_bases_are_registered(based, models):
    line = one_line_error(
        based("commit", "chat", models["a1"], "-m", "x", "--base", "llama-70b"), "llama-70b"
    )
    assert "registered here: tiny-llama" in line and "mint base add NAME PATH" in line


def test_an_unknown_base_in_an_empty_repository_says_how_to_register_one(mint, models):
    line = one_line_error(mint("commit", "chat", models["a1"], "-m", "x"), "tiny-llama")
    assert "no base is registered here yet" in line and "mint base add" in line


def test_a_revision_past_the_first_commit_says_how_long_the_line_is(based, repo):
    first = api.resolve(repo, "chat~1")
    for rev in ("chat~10", "chat~1~1"):
        line = one_line_error(based("log", rev))
        assert "the history of chat has 2 commits" in line, line
        assert f"chat~1 is the first, {first[:12]}" in line, line


def test_diff_says_when_a_tensors_shape_changed(based, models):
    """a3 has rank 8 where a1 and a2 have 4: its LoRA matrices changed shape, and the diff says
    so instead of `rel_delta=n/a`."""
    assert based("commit", "chat", models["a3"], "-m", "rank 8").code == 0
    out = based("diff", "chat~1", "chat").out
    changed = [line for line in out.splitlines() if line.startswith("  ~ ")]
    assert changed and all("shape " in line and " -> " in line for line in changed), out
    assert "rel_delta=n/a" not in out
    assert re.search(r"lora_A\.weight  shape 4x\d+ -> 8x\d+", out), out
    as_json = based("diff", "chat~1", "chat", "--json").json()
    first = as_json["tensors"]["changed"][0]
    assert first["rel_delta"] is None and first["shape_a"][0] == 4 and first["shape_b"][0] == 8
    same_shape = based("diff", "chat~2", "chat~1").out
    assert "rel_delta=" in same_shape and "shape " not in same_shape


# --- item 10: where a refused token came from -----------------------------------------------


def test_a_refused_token_says_where_it_came_from(tmp_path, monkeypatch, models):
    """A stale token is named by its source: MINT_TOKEN, or the file `mint login` keeps; an
    empty `MINT_TOKEN=` is said on stderr, not passed over in silence."""
    from mint.cli import run_in_process
    from mint.remote.config import config_dir, save_token

    from support.registry import create_token, running_registry

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("MINT_TOKEN", raising=False)
    registry, _ = api.init(tmp_path / "registry")
    registry.close()
    reader = create_token(tmp_path / "registry", "rita", "reader")
    with running_registry(tmp_path / "registry") as server:

        def status(env: dict) -> tuple[int, str, str]:
            for key, value in env.items():
                monkeypatch.setenv(key, value)
            try:
                return run_in_process(["--repo", server.url, "status"])
            finally:
                for key in env:
                    monkeypatch.delenv(key, raising=False)

        code, _, err = status({"MINT_TOKEN": "stale-token"})
        assert code == 1 and "came from MINT_TOKEN" in err and len(err.splitlines()) == 1, err
        kept = save_token(config_dir(os.environ), server.url, "stale-too")
        code, _, err = status({})
        assert code == 1 and str(kept) in err and f"mint login {server.url}" in err, err
        save_token(config_dir(os.environ), server.url, reader)
        code, out, err = status({"MINT_TOKEN": ""})
        assert code == 0 and out.startswith("LINE"), (out, err)
        assert err.strip() == (
            f"mint: warning: MINT_TOKEN is set but empty; sending the token `mint login` kept "
            f"({kept})"
        ), err
        code, out, err = status({})
        assert code == 0 and err == ""
