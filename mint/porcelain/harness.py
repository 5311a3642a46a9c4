"""Evidence from the field's own harnesses (docs/harness.md): a results file that lm-eval or
inspect_ai wrote, recorded as an evaluation of a commit once the model it names is found to be
that commit over its base (`mint eval REV --from HARNESS FILE`), and the harness run by mint
itself, unmodified, when a contract's [evaluator] names one. Written once over the backend, so
`--repo URL` records on a registry what was measured here."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

from mint import __version__
from mint.backend import Backend, backend_of
from mint.bases import fingerprint_path
from mint.commits.adapter import CONFIG, WEIGHTS
from mint.errors import BaseFolderUnknown, EvaluationFailed, InvalidResults, OtherModel
from mint.gates.harness import HarnessRun, joined, read_run
from mint.objects import CommitDetail, Evaluation
from mint.store import sha256_file

MODULES = {"lm-eval": "lm_eval", "inspect": "inspect_ai"}  # each run as `python -m MODULE`
BASE_CONFIG = "config.json"


def record_harness(
    repo,
    rev: str,
    contract: str,
    harness: str,
    path: str | os.PathLike,
    *,
    reason: str | None = None,
    by: str,
) -> Evaluation:
    """Record the scores of the results file at PATH, written by HARNESS (lm-eval or inspect),
    as an evaluation of REV under CONTRACT. The file must name REV's adapter (its files, as
    checked out) over REV's base; REASON records it even when it names another model."""
    b = backend_of(repo)
    detail = b.show(rev)
    run = read_run(harness, path)
    check = model_check(b, detail, run, Path(path).resolve().parent, reason)
    info = run.provenance | {
        "file": Path(path).name,
        "file_sha256": sha256_file(path),
        "model_check": check,
        "mint": __version__,
    }
    return b.record_evaluation(
        detail.id, contract, run.metrics, source=run.harness, evaluator=info, by=by
    )


# --- is it this commit? ---------------------------------------------------------------


def model_check(
    b: Backend, detail: CommitDetail, run: HarnessRun, near: Path, reason: str | None
) -> dict:
    """How the model RUN names was found to be DETAIL's adapter over its base; with REASON, a
    model that is not (or cannot be checked) is kept with the reason and what differed."""
    try:
        return _same_model(b, detail, run, near)
    except OtherModel as exc:
        if not reason:
            raise
        return {"forced": reason, "mismatch": exc.why}


def _same_model(b: Backend, detail: CommitDetail, run: HarnessRun, near: Path) -> dict:
    rev = detail.id[:12]
    base, adapter = run.base, run.adapter
    if adapter is None and base is not None:  # pretrained=ADAPTER: transformers finds its base
        folder = _folder(base, near)
        if folder is not None and (folder / CONFIG).is_file():
            adapter, base = base, None
    if adapter is None:
        raise OtherModel(rev, "they name no adapter (no peft= among the model's arguments)")
    folder = _folder(adapter, near)
    if folder is None or not (folder / CONFIG).is_file():
        raise OtherModel(rev, f"their adapter {adapter!r} is no adapter folder here to check")
    for name in (CONFIG, WEIGHTS):
        recorded = detail.files.get(name)
        if not (folder / name).is_file() or recorded is None:
            raise OtherModel(rev, f"their adapter {adapter} has no {name} to compare")
        if sha256_file(folder / name) != recorded.sha256:
            raise OtherModel(rev, f"their adapter {adapter} has another {name}")
    if base is None:  # as transformers loads it: the folder's base files, else the one it names
        base = str(folder) if (folder / BASE_CONFIG).is_file() else _named_base(folder)
    _same_base(b, detail, base, _folder(base, near) if base else None)
    return {"adapter": f"{adapter}: {CONFIG} and {WEIGHTS} as committed", "base": base}


def _same_base(b: Backend, detail: CommitDetail, base: str | None, folder: Path | None) -> None:
    rev = detail.id[:12]
    if folder is not None and (folder / BASE_CONFIG).is_file():
        if fingerprint_path(folder) != detail.base_fingerprint:
            raise OtherModel(rev, f"their base model {base} is not {detail.base}")
        return
    registered = b.get_base(detail.base)
    if base not in {detail.base, registered.source, _base_folder(registered.source)}:
        raise OtherModel(rev, f"their base model {base!r} is not {detail.base}")


def _named_base(folder: Path) -> str | None:
    try:
        named = json.loads((folder / CONFIG).read_text()).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        return None
    return named if isinstance(named, str) else None


def _folder(value: str | None, near: Path) -> Path | None:
    """The folder VALUE names: as it is, else from NEAR (the results file's folder) and up to
    three folders above it (lm-eval writes under OUTPUT/MODEL/ what it ran from further up)."""
    if not value:
        return None
    path = Path(value).expanduser()
    tries = [path] if path.is_absolute() else [Path.cwd() / path]
    if not path.is_absolute():
        tries += [p / path for p in [near, *near.parents][:4]]
    return next((p for p in tries if p.is_dir()), None)


def _base_folder(source: str | None) -> str | None:
    if not source:
        return None
    path = Path(source)
    return str(path.parent if path.name == BASE_CONFIG else path)


# --- the harness, run by mint ------------------------------------------------------------


def base_folder(b: Backend, detail: CommitDetail, base_dir: str | None) -> Path:
    """The folder of DETAIL's base: BASE_DIR, else where it was registered from."""
    folder = base_dir or _base_folder(b.get_base(detail.base).source)
    if not folder or not (Path(folder) / BASE_CONFIG).is_file():
        raise BaseFolderUnknown(detail.base)
    return Path(folder).resolve()


def run_harness(ev: dict, checkout: Path, base: Path, out: Path) -> HarnessRun:
    """Run EV's harness (a contract's [evaluator]) on the adapter at CHECKOUT over the base at
    BASE, writing under OUT, and read what it wrote."""
    from mint.gates.evaluator import run_command

    harness = ev["harness"]
    if importlib.util.find_spec(MODULES[harness]) is None:
        raise EvaluationFailed(f"harness {harness} is not installed beside mint; nothing recorded")
    include = Path(ev["include"]).resolve() if ev.get("include") else None
    if include is not None and not include.is_dir():
        raise EvaluationFailed(f"evaluator.include {ev['include']} is not a folder here")
    argv = (_lm_eval_argv if harness == "lm-eval" else _inspect_argv)(ev, checkout, base, out)
    env = dict(os.environ)
    if include is not None:  # local task files: nothing is fetched (docs/harness.md)
        env |= {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
        argv += ["--include_path", str(include)] if harness == "lm-eval" else []
    run_command(argv, ev["timeout"], cwd=include, env=env)
    pattern = "results_*.json" if harness == "lm-eval" else "*.json"
    files = sorted(p for p in out.rglob(pattern) if p.is_file())
    if not files:
        raise EvaluationFailed(f"{harness} wrote no results under {out}; nothing recorded")
    if harness == "lm-eval":
        return read_run(harness, files[-1])
    return joined([read_run(harness, f) for f in files])


def _lm_eval_argv(ev: dict, checkout: Path, base: Path, out: Path) -> list[str]:
    if "," in f"{checkout}{base}":
        raise InvalidResults(str(base), "lm-eval's model arguments cannot hold a comma")
    args = f"pretrained={base},peft={checkout},tokenizer={base}"
    argv = [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args", args]
    argv += ["--tasks", ",".join(ev["tasks"]), "--output_path", str(out)]
    if "limit" in ev:
        argv += ["--limit", f"{ev['limit']:g}"]
    if "num_fewshot" in ev:
        argv += ["--num_fewshot", str(ev["num_fewshot"])]
    return argv


def _inspect_argv(ev: dict, checkout: Path, base: Path, out: Path) -> list[str]:
    """inspect's hf provider loads model_path with transformers, which loads an adapter folder
    that holds its base's files over that base: the base's files are linked in beside it."""
    for item in base.iterdir():
        if not (checkout / item.name).exists():
            (checkout / item.name).symlink_to(item)
    argv = [sys.executable, "-m", "inspect_ai", "eval", *ev["tasks"], "--model", "hf/adapter"]
    argv += ["-M", f"model_path={checkout}", "--log-format", "json", "--log-dir", str(out)]
    argv += ["--display", "none"]
    if "limit" in ev:
        argv += ["--limit", f"{ev['limit']:g}"]
    return argv


def hash_tasks(include: str | None) -> str | None:
    """One sha256 over the task folder's files (path and content), or None without one."""
    if not include or not Path(include).is_dir():
        return None
    import hashlib

    root = Path(include)
    h = hashlib.sha256()
    for p in sorted(q for q in root.rglob("*") if q.is_file() and "__pycache__" not in q.parts):
        h.update(f"{p.relative_to(root).as_posix()}\0{sha256_file(p)}\n".encode())
    return h.hexdigest()
