"""The field's evaluation harnesses run unmodified on the tiny base, offline (issue 39): a local
lm-eval task (a YAML file and its JSONL data) and a local inspect_ai task (a Python file and
its JSONL), and one run of each harness as a user runs it from a shell. The runs are slow
(lm-eval's imports alone take most of a minute here): a test module shares one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

LM_EVAL_TASK = """\
task: tinyqa
dataset_path: json
dataset_kwargs:
  data_files:
    test: tinyqa.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "{{question}} answer :"
doc_to_choice: "{{choices}}"
doc_to_target: "{{label}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 2.0
"""

INSPECT_TASK = """\
from inspect_ai import Task, task
from inspect_ai.dataset import json_dataset
from inspect_ai.model import GenerateConfig
from inspect_ai.scorer import includes
from inspect_ai.solver import generate


@task
def tinyqa():
    return Task(
        dataset=json_dataset("tinyqa.jsonl"),
        solver=generate(),
        scorer=includes(),
        config=GenerateConfig(max_tokens=3),
        version=3,
    )
"""

QUESTIONS = [  # words the tiny tokenizer knows
    ("what is the code ?", ["code", "chat", "plan"]),
    ("tell a joke", ["joke", "email", "flight"]),
    ("plan a day", ["plan", "hotel", "python"]),
    ("open the file", ["file", "weather", "order"]),
    ("fix the bug", ["bug", "morning", "ticket"]),
    ("send the email", ["email", "code", "story"]),
    ("book a flight", ["flight", "page", "font"]),
    ("search the web", ["web", "list", "array"]),
]


def lm_eval_task(folder: Path) -> Path:
    """tinyqa.yaml and tinyqa.jsonl (8 questions) in FOLDER: lm-eval's `--include_path`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tinyqa.yaml").write_text(LM_EVAL_TASK)
    rows = [{"question": q, "choices": c, "label": 0} for q, c in QUESTIONS]
    (folder / "tinyqa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def inspect_task(folder: Path) -> Path:
    """tinyqa.py and tinyqa.jsonl in FOLDER: inspect's task file and its data."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tinyqa.py").write_text(INSPECT_TASK)
    rows = [{"input": q, "target": c[0]} for q, c in QUESTIONS]
    (folder / "tinyqa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def offline() -> dict:
    """This process's environment with the Hub and its datasets offline."""
    return {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}


def _run(argv: list[str], cwd: Path) -> None:
    done = subprocess.run(
        argv, cwd=cwd, env=offline(), capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]


def run_lm_eval(base: Path, adapter: Path, tasks: Path, out: Path, limit: int = 4) -> Path:
    """`lm_eval` on ADAPTER over BASE, the task folder TASKS; returns its results file."""
    args = f"pretrained={base},peft={adapter},tokenizer={base}"
    argv = [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args", args]
    argv += ["--tasks", "tinyqa", "--include_path", str(tasks), "--limit", str(limit)]
    _run(argv + ["--output_path", str(out)], tasks)
    (found,) = out.rglob("results_*.json")
    return found


def run_inspect(model_path: Path, tasks: Path, out: Path, limit: int = 3) -> Path:
    """`inspect eval` of tinyqa.py on the hf model at MODEL_PATH; returns its JSON log."""
    argv = [sys.executable, "-m", "inspect_ai", "eval", "tinyqa.py", "--model", "hf/tiny"]
    argv += ["-M", f"model_path={model_path}", "--limit", str(limit), "--display", "none"]
    _run(argv + ["--log-format", "json", "--log-dir", str(out)], tasks)
    (found,) = out.glob("*.json")
    return found


def beside_base(adapter: Path, base: Path, folder: Path) -> Path:
    """ADAPTER's files with BASE's linked in beside them: a folder transformers loads as the
    base with the adapter over it (how inspect's hf provider takes an adapter)."""
    folder.mkdir(parents=True)
    for source in (adapter, base):
        for item in source.iterdir():
            if not (folder / item.name).exists():
                (folder / item.name).symlink_to(item.resolve())
    return folder
