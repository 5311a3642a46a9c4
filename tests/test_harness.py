"""`mint eval REV --from lm-eval RESULTS.json` (issue 39): the unmodified lm_eval, run once for
this module on the tiny base with a committed adapter and a local task (YAML + JSONL, offline),
writes a results file; mint records its scores under the names lm-eval writes, the gate reads
them, the provenance keeps the harness, its version, the task's version and config hash, the
sample counts and the model's arguments; the same through `--repo URL`. A file that names
another adapter or base, lacks a field, or holds NaN is refused in one line, nothing stored."""

from __future__ import annotations

import json
import math

import pytest

from mint import api
from mint.ids import EvalSource

from conftest import one_line_error, snapshot
from support.harness import lm_eval_task, run_lm_eval
from support.registry import create_token, running_registry

pytestmark = pytest.mark.one_database(
    "sqlite",
    "the subject is reading a harness's file; test_gates records evaluations on both databases",
)


ACC, STDERR = "tinyqa/acc,none", "tinyqa/acc_stderr,none"


@pytest.fixture(scope="module")
def results(models, tmp_path_factory):
    """One real lm_eval run: adapter a1 over the tiny base, 4 of tinyqa's 8 questions."""
    root = tmp_path_factory.mktemp("lm-eval")
    tasks = lm_eval_task(root / "tasks")
    return run_lm_eval(models["base"], models["a1"], tasks, root / "out")


@pytest.fixture
def chat(repo, models, mint, results, tmp_path):
    """chat~1 holds a1 (what lm_eval ran), chat a2; contract qa (the score at least what it
    is) guards staging, strict (above it) production."""
    api.base_add(repo, "tiny-llama", models["base"])
    first = api.commit(repo, "chat", models["a1"], "a1", author="alice").id
    api.commit(repo, "chat", models["a2"], "a2", author="alice")
    score = json.loads(results.read_text())["results"]["tinyqa"]["acc,none"]
    for name, channel, floor in (("qa", "staging", score), ("strict", "production", score + 1)):
        path = tmp_path / f"{name}.toml"
        path.write_text(
            f'name = "{name}"\nchannel = "{channel}"\n[[metric]]\nname = "{ACC}"\nmin = {floor}\n'
        )
        api.contract_add(repo, path, by="alice")
    return first, score


def test_lm_eval_results_are_recorded_with_their_provenance(chat, repo, mint, results, models):
    first, score = chat
    r = mint("eval", "chat~1", "--contract", "qa", "--from", "lm-eval", results, "--json")
    assert r.code == 0, r
    ev = api.evaluations_of(repo, first)[-1]
    assert ev.id == r.json()["id"] and ev.source == EvalSource.LM_EVAL
    assert ev.metrics[ACC] == score and STDERR in ev.metrics  # the names lm-eval writes
    p = ev.evaluator
    assert (p["harness"], p["version"], p["model"]) == ("lm-eval", "0.4.13", "hf")
    task = p["tasks"]["tinyqa"]
    assert task["version"] == 2.0 and task["n_shot"] == 0
    assert task["samples"] == {"original": 8, "effective": 4}
    assert len(task["config_hash"]) == 64 and p["limit"] == 4
    assert p["model_args"]["peft"] == str(models["a1"])
    assert "as committed" in p["model_check"]["adapter"]
    from mint.store import sha256_file

    assert p["file_sha256"] == sha256_file(results)
    # the gate reads the recorded score: it passes qa and fails strict, naming what it found
    assert mint("gate", first, "--to", "staging", "--contract", "qa").code == 0
    mint("eval", first, "--contract", "strict", "--from", "lm-eval", results)
    refused = mint("gate", first, "--to", "production")
    assert refused.code == 3 and f"{score:g}" in refused.out and "FAIL" in refused.out


def test_results_of_another_adapter_are_refused_unless_forced(chat, repo, mint, results):
    before = snapshot(repo)
    line = one_line_error(mint("eval", "chat", "--contract", "qa", "--from", "lm-eval", results))
    assert "another adapter_model.safetensors" in line and "--force --reason" in line
    assert snapshot(repo) == before
    usage = mint("eval", "chat", "--contract", "qa", "--from", "lm-eval", results, "--force")
    assert usage.code == 2 and snapshot(repo) == before
    forced = mint(
        "eval", "chat", "--contract", "qa", "--from", "lm-eval", results,
        "--force", "--reason", "a1's numbers stand for a2 until it is evaluated", "--json",
    )  # fmt: skip
    assert forced.code == 0, forced
    check = forced.json()["evaluator"]["model_check"]
    assert check["forced"].startswith("a1's numbers") and "another" in check["mismatch"]


def _variant(results, tmp_path, name: str, change) -> str:
    d = json.loads(results.read_text())
    change(d)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(d))  # NaN is written as NaN, as lm-eval's json.dump writes it
    return str(path)


def test_bad_results_files_are_refused_in_one_line(chat, repo, mint, results, models, tmp_path):
    from mint.examples import tiny

    other = tiny.build_base(tmp_path / "other-llama", hidden=32, heads=2)

    def nan(d):
        d["results"]["tinyqa"]["acc,none"] = math.nan

    def args(d, **kw):
        d["config"]["model_args"] |= kw

    cases = {
        "n-samples": lambda d: d.pop("n-samples"),  # another lm-eval version's file
        "must be finite": nan,
        "is not tiny-llama": lambda d: args(d, pretrained=str(other)),
        "another adapter_config.json": lambda d: args(d, peft=str(models["a3"])),
        "no peft=": lambda d: d["config"]["model_args"].pop("peft"),
        "holds no score": lambda d: d.update(results={"tinyqa": {"alias": "tinyqa"}}),
    }
    before = snapshot(repo)
    for words, change in cases.items():
        path = _variant(results, tmp_path, words.replace(" ", "-").replace("=", ""), change)
        r = mint("eval", "chat~1", "--contract", "qa", "--from", "lm-eval", path)
        one_line_error(r, words, code=1)
    (tmp_path / "text.json").write_text("not json")
    one_line_error(
        mint("eval", "chat~1", "--contract", "qa", "--from", "lm-eval", tmp_path / "text.json"),
        "is not JSON",
    )
    one_line_error(
        mint("eval", "chat~1", "--contract", "qa", "--from", "helm", results), "unknown harness"
    )
    assert snapshot(repo) == before


def test_lm_eval_results_through_a_registry(chat, repo, results, monkeypatch):
    from mint.cli import run_in_process

    first, score = chat
    monkeypatch.setenv("MINT_TOKEN", create_token(repo.root, "eve", "writer"))
    with running_registry(repo.root) as registry:
        argv = ["--repo", registry.url, "eval", "chat~1", "--contract", "qa"]
        code, out, err = run_in_process([*argv, "--from", "lm-eval", str(results), "--json"])
        assert code == 0, err
        refused = run_in_process([*argv[:3], "chat", *argv[4:], "--from", "lm-eval", str(results)])
        gate = run_in_process(["--repo", registry.url, "gate", first, "--to", "staging"])
    assert refused[0] == 1 and "another adapter_model" in refused[2]
    ev = api.evaluations_of(repo, first)[-1]
    assert ev.id == json.loads(out)["id"] and ev.by == "eve" and ev.source == "lm-eval"
    assert (
        ev.metrics[ACC] == score and ev.evaluator["tasks"]["tinyqa"]["samples"]["effective"] == 4
    )
    assert gate[0] == 0, gate
    assert len(api.evaluations_of(repo, "chat")) == 0  # the refused file recorded nothing
