"""A contract's [evaluator] that names a harness (issue 39): `mint eval REV --contract C` runs
lm-eval (or inspect), unmodified, on a checkout of REV over the registered base, offline, with
the task files committed beside the contract; what the harness wrote is read and checked as
`--from` reads a file, and recorded. One run of each harness for the module, on one
repository (the runs are slow; the contract's checks run on both databases)."""

from __future__ import annotations

import pytest

from mint import api
from mint.ids import EvalSource
from mint.porcelain.harness import hash_tasks

from conftest import one_line_error
from support.harness import inspect_task, lm_eval_task

LM_EVAL = """
name = "qa"
channel = "staging"
[[metric]]
name = "tinyqa/acc,none"
min = 0
[evaluator]
harness = "lm-eval"
tasks = ["tinyqa"]
include = "{tasks}"
limit = 3
num_fewshot = 0
version = "tinyqa v2"
"""

INSPECT = """
name = "qa-inspect"
channel = "staging"
[[metric]]
name = "tinyqa/includes/accuracy"
min = 0
[evaluator]
harness = "inspect"
tasks = ["tinyqa.py"]
include = "{tasks}"
limit = 2
"""


@pytest.fixture(scope="module")
def evaluated(models, tmp_path_factory):
    """chat holds a1; contracts qa (lm-eval) and qa-inspect name their harness and task
    folders; `mint eval` has run each once. Yields (repo, chat, task folders, evaluations)."""
    from mint.cli import run_in_process

    root = tmp_path_factory.mktemp("harness-evaluator")
    repo, _ = api.init(root / "repo")
    api.base_add(repo, "tiny-llama", models["base"])
    chat = api.commit(repo, "chat", models["a1"], "a1", author="alice").id
    tasks = {"qa": lm_eval_task(root / "lm-tasks"), "qa-inspect": inspect_task(root / "i-tasks")}
    found = {}
    for name, text in (("qa", LM_EVAL), ("qa-inspect", INSPECT)):
        (root / f"{name}.toml").write_text(text.format(tasks=tasks[name]))
        api.contract_add(repo, root / f"{name}.toml", by="alice")
        code, out, err = run_in_process(
            ["--repo", str(repo.root), "eval", "chat", "--contract", name]
        )
        assert code == 0, err
        found[name] = api.evaluations_of(repo, chat)[-1]
    yield repo, chat, tasks, found
    repo.close()


def test_lm_eval_named_by_the_contract_runs_on_a_checkout_over_the_base(evaluated):
    repo, chat, tasks, found = evaluated
    ev = found["qa"]
    assert ev.contract == "qa" and ev.source == EvalSource.LM_EVAL
    assert 0 <= ev.metrics["tinyqa/acc,none"] <= 1
    p = ev.evaluator
    assert p["run_by"] == "mint" and p["version"] == "0.4.13"
    assert p["tasks"]["tinyqa"]["samples"] == {"original": 8, "effective": 3}
    assert p["tasks"]["tinyqa"]["version"] == 2.0 and p["tasks"]["tinyqa"]["n_shot"] == 0
    assert p["evaluator_version"] == "tinyqa v2" and p["include"] == str(tasks["qa"])
    assert "as committed" in p["model_check"]["adapter"]
    assert ev.data_hash == hash_tasks(str(tasks["qa"]))  # the task files, as committed
    assert api.gate(repo, chat, "staging").ok


def test_inspect_named_by_the_contract_runs_too(evaluated):
    repo, chat, _, found = evaluated
    ev = found["qa-inspect"]
    assert ev.source == EvalSource.INSPECT and "tinyqa/includes/accuracy" in ev.metrics
    assert ev.evaluator["tasks"]["tinyqa"]["samples"] == {"total": 2, "completed": 2}
    assert ev.evaluator["model_args"]["model_path"].endswith("checkout")


@pytest.mark.parametrize(
    "evaluator, words",
    [
        ('harness = "helm"\ntasks = ["x"]', "must be one of lm-eval, inspect"),
        ('harness = "lm-eval"', "tasks must be a non-empty list"),
        ('harness = "lm-eval"\ntasks = ["x"]\ncommand = ["x"]', "a command and a harness"),
        ('harness = "inspect"\ntasks = ["x.py"]\nnum_fewshot = 2', "num_fewshot is lm-eval's"),
        ('harness = "lm-eval"\ntasks = ["x"]\nlimit = -1', "limit must be a number above 0"),
        ('command = ["x"]\ntasks = ["x"]', "is for a harness"),
    ],
)
def test_a_harness_evaluator_is_checked_when_the_contract_is_added(
    repo, mint, tmp_path, evaluator, words
):
    path = tmp_path / "c.toml"
    path.write_text(f'name = "c"\nchannel = "staging"\n[evaluator]\n{evaluator}\n')
    one_line_error(mint("contract", "add", path), words, code=1)
    assert api.contract_ls(repo) == []


def test_a_harness_evaluator_needs_the_base_folder_and_the_task_folder(
    repo, mint, models, tmp_path
):
    import shutil

    base = shutil.copytree(models["base"], tmp_path / "tiny-llama")
    api.base_add(repo, "tiny-llama", base)
    api.commit(repo, "chat", models["a1"], "a1", author="alice")
    path = tmp_path / "c.toml"
    path.write_text(LM_EVAL.format(tasks=tmp_path / "no-such-folder"))
    api.contract_add(repo, path, by="alice")
    one_line_error(mint("eval", "chat", "--contract", "qa"), "is not a folder here", code=1)
    shown = mint("contract", "show", "qa").out
    assert "evaluator: lm-eval tasks=tinyqa" in shown and "limit=3" in shown
    shutil.rmtree(base)  # the base's folder is gone since it was registered
    one_line_error(mint("eval", "chat", "--contract", "qa"), "tiny-llama", code=1)
    assert api.evaluations_of(repo, "chat") == []
