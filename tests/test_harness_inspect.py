"""`mint eval REV --from inspect LOG` (issue 39): the unmodified `inspect eval`, run once for
this module on a small local task (a Python file and its JSONL) with the tiny base and a
committed adapter through inspect's hf provider; mint records each scorer's metrics as
TASK/SCORER/METRIC, the gate reads them, the provenance keeps inspect's version, the task's
version and dataset, the sample counts and the model's arguments; the same through
`--repo URL`; a log of a failed run, of another version's shape, with NaN, or of another
adapter is refused in one line, nothing stored."""

from __future__ import annotations

import json
import math
import zipfile

import pytest

from mint import api
from mint.ids import EvalSource

from conftest import one_line_error, snapshot
from support.harness import beside_base, inspect_task, run_inspect
from support.registry import create_token, running_registry

pytestmark = pytest.mark.one_database(
    "sqlite",
    "the subject is reading a harness's file; test_gates records evaluations on both databases",
)


ACCURACY = "tinyqa/includes/accuracy"


@pytest.fixture(scope="module")
def log(models, tmp_path_factory):
    """One real inspect run: a1 over the tiny base (its files linked beside a1's), 3 samples."""
    root = tmp_path_factory.mktemp("inspect")
    model = beside_base(models["a1"], models["base"], root / "model")
    return run_inspect(model, inspect_task(root / "tasks"), root / "logs")


@pytest.fixture
def chat(repo, models, tmp_path):
    """chat~1 holds a1 (what inspect ran), chat a2; contract qa guards staging."""
    api.base_add(repo, "tiny-llama", models["base"])
    first = api.commit(repo, "chat", models["a1"], "a1", author="alice").id
    api.commit(repo, "chat", models["a2"], "a2", author="alice")
    path = tmp_path / "qa.toml"
    path.write_text(f'name = "qa"\nchannel = "staging"\n[[metric]]\nname = "{ACCURACY}"\nmin = 0')
    api.contract_add(repo, path, by="alice")
    return first


def test_inspect_scores_are_recorded_with_their_provenance(chat, repo, mint, log, tmp_path):
    r = mint("eval", "chat~1", "--contract", "qa", "--from", "inspect", log, "--json")
    assert r.code == 0, r
    ev = api.evaluations_of(repo, chat)[-1]
    written = json.loads(log.read_text())
    assert ev.source == EvalSource.INSPECT and ev.id == r.json()["id"]
    scores = written["results"]["scores"][0]["metrics"]
    assert ev.metrics[ACCURACY] == scores["accuracy"]["value"]
    assert "tinyqa/includes/stderr" in ev.metrics
    p = ev.evaluator
    assert p["harness"] == "inspect" and p["version"] == written["eval"]["packages"]["inspect_ai"]
    task = p["tasks"]["tinyqa"]
    assert task["version"] == 3 and task["samples"] == {"total": 3, "completed": 3}
    assert task["dataset"]["samples"] == 8 and task["dataset"]["location"] == "tinyqa.jsonl"
    assert p["model"] == "hf/tiny" and p["limit"] == 3 and "model_path" in p["model_args"]
    assert mint("gate", chat, "--to", "staging").code == 0
    # inspect's own .eval archive holds the same header: it is read the same way
    archive = tmp_path / "run.eval"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("header.json", json.dumps({k: v for k, v in written.items() if k != "samples"}))
    again = mint("eval", "chat~1", "--contract", "qa", "--from", "inspect", archive, "--json")
    assert again.code == 0 and again.json()["metrics"] == r.json()["metrics"]


def test_bad_inspect_logs_are_refused_in_one_line(chat, repo, mint, log, models, tmp_path):
    def nan(d):
        d["results"]["scores"][0]["metrics"]["accuracy"]["value"] = math.nan

    def other(d):
        d["eval"]["model_args"]["model_path"] = str(models["a2"])

    cases = {
        "status is 'error'": lambda d: d.update(status="error"),
        "eval.packages": lambda d: d["eval"].pop("packages"),  # another version's shape
        "must be finite": nan,
        "another adapter_model": other,
    }
    before = snapshot(repo)
    for i, (words, change) in enumerate(cases.items()):
        d = json.loads(log.read_text())
        change(d)
        path = tmp_path / f"bad{i}.json"
        path.write_text(json.dumps(d))
        r = mint("eval", "chat~1", "--contract", "qa", "--from", "inspect", path)
        one_line_error(r, words, code=1)
    one_line_error(mint("eval", "chat", "--contract", "qa", "--from", "inspect", log), "not of")
    assert snapshot(repo) == before


def test_inspect_scores_through_a_registry(chat, repo, log, monkeypatch):
    from mint.cli import run_in_process

    monkeypatch.setenv("MINT_TOKEN", create_token(repo.root, "ivy", "writer"))
    with running_registry(repo.root) as registry:
        argv = ["--repo", registry.url, "eval", "chat~1", "--contract", "qa"]
        code, out, err = run_in_process([*argv, "--from", "inspect", str(log), "--json"])
        gate = run_in_process(["--repo", registry.url, "gate", "chat~1", "--to", "staging"])
    assert code == 0, err
    ev = api.evaluations_of(repo, chat)[-1]
    assert ev.id == json.loads(out)["id"] and ev.by == "ivy" and ev.source == "inspect"
    assert ev.evaluator["tasks"]["tinyqa"]["samples"]["completed"] == 3
    assert gate[0] == 0, gate
