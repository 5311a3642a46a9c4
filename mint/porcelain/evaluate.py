"""`mint eval` with a contract's evaluator: its command runs here, on a checkout of the
revision, and its metrics are recorded by the repository (a registry records who sent them).
An evaluator that names a harness (lm-eval, inspect) is run by mint.porcelain.harness."""

from __future__ import annotations

import tempfile
from pathlib import Path

from mint import __version__
from mint.backend import backend_of
from mint.errors import EvaluationFailed
from mint.ids import EvalSource
from mint.objects import Evaluation
from mint.porcelain.files import checkout


def evaluate(repo, rev: str, contract: str, *, by: str, base_dir: str | None = None) -> Evaluation:
    """Check REV out to a temporary folder, run CONTRACT's evaluator there, record it. A
    harness runs over the base at BASE_DIR (default: where the base was registered from)."""
    from mint.gates.evaluator import hash_data, parse_metrics, run_command

    b = backend_of(repo)
    cid = b.resolve(rev)
    c = b.contract_show(contract, line=b.log(cid, 1)[0].line)
    ev = c.evaluator
    if not ev:
        raise EvaluationFailed(
            f"contract {c.name} has no [evaluator]; record results with --metric KEY=VALUE"
        )
    if "harness" in ev:
        return _harness(repo, b, cid, c.name, ev, base_dir, by)
    with tempfile.TemporaryDirectory(prefix="mint-eval-") as tmp:
        folder = Path(tmp) / "checkout"
        checkout(repo, cid, folder)
        argv = [
            a.replace("{checkout}", str(folder)).replace("{commit}", cid) for a in ev["command"]
        ]
        metrics = parse_metrics(run_command(argv, ev["timeout"]), {"metrics": c.metrics})
    info = {"command": ev["command"], "version": ev.get("version"), "mint": __version__}
    return b.record_evaluation(
        cid,
        c.name,
        metrics,
        source=EvalSource.EVALUATOR,
        evaluator=info,
        data_hash=hash_data(ev.get("data")),
        by=by,
    )


def _harness(repo, b, cid: str, contract: str, ev: dict, base_dir, by: str) -> Evaluation:
    """The harness EV names, run unmodified on a checkout of CID over its base; what it wrote
    is read and checked as `mint eval --from` reads and checks a file."""
    from mint.gates.evaluator import hash_data
    from mint.porcelain.harness import base_folder, hash_tasks, model_check, run_harness

    detail = b.show(cid)
    if detail.kind != "adapter":
        raise EvaluationFailed(f"a harness evaluates an adapter; {cid[:12]} is a {detail.kind}")
    base = base_folder(b, detail, base_dir)
    with tempfile.TemporaryDirectory(prefix="mint-eval-") as tmp:
        folder, out = Path(tmp) / "checkout", Path(tmp) / "results"
        checkout(repo, cid, folder)
        run = run_harness(ev, folder, base, out)
        check = model_check(b, detail, run, out, None)
    info = run.provenance | {"model_check": check, "run_by": "mint", "mint": __version__}
    info |= {"evaluator_version": ev.get("version"), "include": ev.get("include")}
    data_hash = hash_data(ev.get("data")) or hash_tasks(ev.get("include"))
    return b.record_evaluation(
        cid, contract, run.metrics, source=run.harness, evaluator=info, data_hash=data_hash, by=by
    )
