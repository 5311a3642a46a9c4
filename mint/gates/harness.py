"""The field's evaluation harnesses' own files read as evaluations: lm-evaluation-harness's
`results_*.json` (`lm_eval --output_path`) and inspect_ai's logs (`inspect eval`, JSON or
`.eval`). Each score keeps the name the harness writes (`TASK/METRIC,FILTER` for lm-eval,
`TASK/SCORER/METRIC` for inspect), and the provenance keeps what makes the numbers
comparable: the harness and its version, each task's version and config hash, the sample
counts, the model and its arguments. Only JSON is read here: nothing runs, nothing imports
a harness (mint.porcelain.harness runs one, and checks the model a file names)."""

from __future__ import annotations

import json
import math
import zipfile
from dataclasses import dataclass
from pathlib import Path

from mint.errors import InvalidResults
from mint.ids import EvalSource, object_id

MAX_FILE = 256 * 1024 * 1024  # a results file or log read whole (inspect logs hold samples)
MAX_NAME = 100  # a metric's name, as an evaluation's key (the registry's bound)


@dataclass(frozen=True)
class HarnessRun:
    """What one results file says: its scores, their provenance, and the model it names (a
    folder or a name, as the harness was given them; None where it names none)."""

    harness: EvalSource
    metrics: dict[str, float]
    provenance: dict
    base: str | None
    adapter: str | None


def read_run(harness: str, path: str | Path) -> HarnessRun:
    """The run that the results file (lm-eval) or log (inspect) at PATH records."""
    try:
        source = EvalSource(harness)
    except ValueError:
        source = None
    if source == EvalSource.LM_EVAL:
        return lm_eval_run(str(path), _read_json(path))
    if source == EvalSource.INSPECT:
        return inspect_run(str(path), _read_inspect(path))
    raise InvalidResults(str(path), f"unknown harness {harness!r} (known: lm-eval, inspect)")


def _read_bytes(path: str | Path) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE + 1)
    except OSError as exc:
        raise InvalidResults(str(path), f"cannot be read: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE:
        raise InvalidResults(str(path), f"is larger than {MAX_FILE // 2**20} MiB")
    return data


def _parse(path, data: bytes) -> dict:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidResults(str(path), f"is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidResults(str(path), "does not hold a JSON object")
    return value


def _read_json(path) -> dict:
    return _parse(path, _read_bytes(path))


def _read_inspect(path) -> dict:
    """A log as `--log-format json` writes it, or the header of an `.eval` archive."""
    try:
        with zipfile.ZipFile(path) as archive:
            if "header.json" not in archive.namelist():
                raise InvalidResults(str(path), "is an archive without header.json")
            return _parse(path, archive.read("header.json"))
    except zipfile.BadZipFile:
        return _read_json(path)
    except OSError as exc:
        raise InvalidResults(str(path), f"cannot be read: {exc.strerror or exc}") from None


def _field(path, table: dict, key: str, kind: type | tuple, where: str = ""):
    """TABLE[KEY], which must be a KIND: a file from another version of the harness may lack
    it, and is refused by the field's name rather than half read."""
    if key not in table:
        what = f"{where}.{key}" if where else key
        raise InvalidResults(
            str(path), f"has no {what!r}: not a results file of a harness version mint reads"
        )
    value = table[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        what = f"{where}.{key}" if where else key
        raise InvalidResults(str(path), f"{what!r} is {type(value).__name__}, not as expected")
    return value


def score(path, name: str, value: object) -> float | None:
    """A score as recorded: a finite number; None for what the harness writes where it has
    none (lm-eval's "N/A" standard error); NaN, infinity or anything else is refused."""
    if isinstance(value, str) or value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidResults(str(path), f"score {name} is {value!r}, not a number")
    if not math.isfinite(float(value)):
        raise InvalidResults(str(path), f"score {name} is {value!r}: scores must be finite")
    if len(name) > MAX_NAME:
        raise InvalidResults(str(path), f"score name {name[:40]}... is over {MAX_NAME} characters")
    return float(value)


# --- lm-evaluation-harness --------------------------------------------------------------


def model_args(value: object) -> dict:
    """lm-eval's model arguments: a table (0.4.x) or the command line's `k=v,k=v`."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        pairs = (p.partition("=") for p in value.split(",") if p.strip())
        return {k.strip(): v.strip() for k, _, v in pairs}
    return {}


def lm_eval_run(path: str, d: dict) -> HarnessRun:
    version = _field(path, d, "lm_eval_version", str)
    results = _field(path, d, "results", dict)
    config = _field(path, d, "config", dict)
    args = model_args(_field(path, config, "model_args", (dict, str), "config"))
    versions = _field(path, d, "versions", dict)
    samples = _field(path, d, "n-samples", dict)
    metrics: dict[str, float] = {}
    for task, entry in results.items():
        if not isinstance(entry, dict):
            raise InvalidResults(path, f"results.{task} is not a table")
        for key, value in entry.items():
            if "," not in key:  # name, alias, sample_len: not scores (a score is METRIC,FILTER)
                continue
            number = score(path, f"{task}/{key}", value)
            if number is not None:
                metrics[f"{task}/{key}"] = number
    if not metrics:
        raise InvalidResults(path, "holds no score")
    configs, n_shot = d.get("configs") or {}, d.get("n-shot") or {}
    hashes = d.get("task_hashes") or {}
    tasks = {
        task: {
            "version": versions.get(task),
            "config_hash": _config_hash(configs.get(task), args),
            "n_shot": n_shot.get(task),
            "samples": samples.get(task),
            "hash": hashes.get(task) or None,
        }
        for task in results
    }
    provenance = {
        "harness": str(EvalSource.LM_EVAL),
        "version": version,
        "tasks": tasks,
        "model": config.get("model"),
        "model_args": args,
        "limit": config.get("limit"),
        "transformers": d.get("transformers_version"),
    }
    adapter = args.get("peft")
    return HarnessRun(EvalSource.LM_EVAL, metrics, provenance, args.get("pretrained"), adapter)


def _config_hash(config: object, args: dict) -> str | None:
    """The hash of a task's configuration as lm-eval ran it, less the model's arguments that
    it copies into the task's metadata (another folder for one adapter is the same task)."""
    if not isinstance(config, dict):
        return None
    config = dict(config)
    if isinstance(config.get("metadata"), dict):
        config["metadata"] = {k: v for k, v in config["metadata"].items() if k not in args}
    try:
        return object_id(config)
    except (TypeError, ValueError):
        return None


# --- inspect_ai -----------------------------------------------------------------------


def inspect_run(path: str, d: dict) -> HarnessRun:
    _field(path, d, "version", int)
    status = _field(path, d, "status", str)
    if status != "success":
        raise InvalidResults(path, f"the run's status is {status!r}: only a finished run counts")
    ev = _field(path, d, "eval", dict)
    task = _field(path, ev, "task", str, "eval")
    model = _field(path, ev, "model", str, "eval")
    packages = _field(path, ev, "packages", dict, "eval")
    version = _field(path, packages, "inspect_ai", str, "eval.packages")
    results = _field(path, d, "results", dict)
    metrics: dict[str, float] = {}
    for s in _field(path, results, "scores", list, "results"):
        name = s.get("name") if isinstance(s, dict) else None
        if not isinstance(name, str) or not isinstance(s.get("metrics"), dict):
            raise InvalidResults(path, "results.scores holds a score without name or metrics")
        for metric, m in s["metrics"].items():
            value = m.get("value") if isinstance(m, dict) else m
            number = score(path, f"{task}/{name}/{metric}", value)
            if number is not None:
                metrics[f"{task}/{name}/{metric}"] = number
    if not metrics:
        raise InvalidResults(path, "holds no score")
    args = ev.get("model_args") if isinstance(ev.get("model_args"), dict) else {}
    dataset = ev.get("dataset") if isinstance(ev.get("dataset"), dict) else {}
    tasks = {
        task: {
            "version": ev.get("task_version"),
            "file": ev.get("task_file"),
            "args": ev.get("task_args") or {},
            "dataset": {k: dataset.get(k) for k in ("name", "location", "samples")},
            "samples": {
                "total": results.get("total_samples"),
                "completed": results.get("completed_samples"),
            },
        }
    }
    provenance = {
        "harness": str(EvalSource.INSPECT),
        "version": version,
        "tasks": tasks,
        "model": model,
        "model_args": args,
        "limit": (ev.get("config") or {}).get("limit"),
    }
    # hf/NAME with model_path=FOLDER: transformers loads FOLDER, an adapter over the base it
    # names, or beside a base's files (mint.porcelain.harness reads which)
    folder = args.get("model_path") or model.partition("/")[2] or None
    return HarnessRun(EvalSource.INSPECT, metrics, provenance, None, folder)


def joined(runs: list[HarnessRun]) -> HarnessRun:
    """Several runs of one harness on one model (inspect writes a log per task) as one."""
    first = runs[0]
    metrics = {k: v for r in runs for k, v in r.metrics.items()}
    tasks = {k: v for r in runs for k, v in r.provenance["tasks"].items()}
    return HarnessRun(
        first.harness, metrics, first.provenance | {"tasks": tasks}, first.base, first.adapter
    )
