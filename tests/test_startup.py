"""Start-up: a command imports what it uses and nothing more. `mint log` in a fresh process
loads neither torch, the Hub's client, nor the registry's server; every command is still
there, each loaded from its own module when it is looked up."""

from __future__ import annotations

import importlib
from pathlib import Path

import click
import pytest

from mint import api
from mint.cli import COMMANDS, cli, run_in_process

from support.imports import imported_by

# What `mint log` must not load: the runtime's and the Hub's libraries, the registry's server.
HEAVY = (
    "torch",
    "transformers",
    "peft",
    "safetensors",
    "huggingface_hub",
    "numpy",
    "tqdm",
    "httpx",
    "uvicorn",
    "starlette",
    "fastapi",
    "mint.registry",
    "mint.runtime",
    "mint.remote",
)


def loaded(modules: set[str], package: str) -> list[str]:
    return sorted(m for m in modules if m == package or m.startswith(package + "."))


def test_log_in_a_fresh_process_imports_no_heavy_library(repo, models):
    api.base_add(repo, "tiny-llama", models["base"])
    made = api.commit(repo, "chat", models["a1"], "first", author="test")
    proc, modules = imported_by("--repo", str(repo.root), "log", "-n", "20")
    assert proc.returncode == 0 and proc.stdout.startswith(f"commit {made.id[:12]}"), proc
    assert {p: loaded(modules, p) for p in HEAVY} == {p: [] for p in HEAVY}
    assert "mint.cli.commit_cmds" in modules  # the command module log lives in, not others'
    others = ("runtime_cmds", "registry_cmds", "hub_cmds", "remote_cmds", "loop_cmds")
    assert not [m for m in others if f"mint.cli.{m}" in modules]


# Nor what only other commands use (issue 24): ctypes (the store's writeback hint), the
# traces (show's dataset), the safetensors reader (diff), the commit's pass and stat cache,
# signing, sets and the porcelain.
NOT_FOR_LOG = (
    "ctypes",
    "mint.traces",
    "mint.commits.safetensors",
    "mint.commits.ingest",
    "mint.commits.statcache",
    "mint.signing",
    "mint.sets",
    "mint.porcelain",
    "mint.backend",
)


def test_log_loads_nothing_only_other_commands_use(repo, models):
    api.base_add(repo, "tiny-llama", models["base"])
    api.commit(repo, "chat", models["a1"], "first", author="test")
    proc, modules = imported_by("--repo", str(repo.root), "log", "-n", "20")
    assert proc.returncode == 0, proc
    unused = [p for p in NOT_FOR_LOG if p != "ctypes" or repo.db.dialect == "sqlite"]
    assert {p: loaded(modules, p) for p in unused} == {p: [] for p in unused}  # psycopg: ctypes


def test_an_unchanged_recommit_loads_no_database_layer(tmp_path, models):
    """Answered from the stat cache and the SQLite file (mint.commits.early): neither
    SQLAlchemy nor mint's objects and schema, let alone the heavy libraries."""
    repo, _ = api.init(tmp_path / "repo")
    api.base_add(repo, "tiny-llama", models["base"])
    made = api.commit(repo, "chat", models["a1"], "first", author="test")
    repo.close()
    args = ("--repo", str(tmp_path / "repo"), "commit", "chat", str(models["a1"]), "-m", "x")
    proc, modules = imported_by(*args)
    assert proc.returncode == 0 and made.id[:12] in proc.stdout, proc
    assert proc.stdout.startswith("nothing to commit"), proc
    unused = (*HEAVY, "sqlalchemy", "mint.db", "mint.schema", "mint.objects", "mint.porcelain")
    assert {p: loaded(modules, p) for p in unused} == {p: [] for p in unused}


def test_the_wrapper_sees_a_heavy_import():
    """The check above can fail: `mint serve --help` loads the runtime's command module."""
    proc, modules = imported_by("serve", "--help")
    assert proc.returncode == 0 and "Usage: mint serve" in proc.stdout, proc
    assert "mint.cli.runtime_cmds" in modules


def test_every_command_module_is_in_the_table_with_what_it_registers():
    folder = Path(importlib.import_module("mint.cli").__file__).parent
    modules = {p.stem for p in folder.glob("*_cmds.py")}
    nested = {"webhook_cmds"}  # `mint registry webhook`, registered by registry_cmds
    assert set(COMMANDS.values()) == modules - nested
    for module in modules - nested:
        group = click.Group()
        importlib.import_module(f"mint.cli.{module}").register(group)
        assert {name: module for name in group.commands} == {
            name: m for name, m in COMMANDS.items() if m == module
        }


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_is_found_and_has_help(name):
    code, out, err = run_in_process([name, "--help"])
    assert code == 0 and f"Usage: mint {name}" in out, (code, out, err)
    assert name in cli.commands and name in cli.list_commands(None)


def test_top_level_help_lists_every_command():
    code, out, _ = run_in_process(["--help"])
    listed = out.split("Commands:")[1].split()
    assert code == 0 and set(COMMANDS) <= set(listed)


def test_an_unknown_command_is_one_line_with_suggestions():
    code, out, err = run_in_process(["lgo"])
    assert code != 0 and "No such command 'lgo'" in err and "log" in err
    assert len(err.strip().splitlines()) == 1
