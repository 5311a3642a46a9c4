"""`mint eval` with a contract's evaluator: its command runs here, on a checkout of the
revision, and its metrics are recorded by the repository (a registry records who sent them)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from mint import __version__
from mint.backend import backend_of
from mint.errors import EvaluationFailed
from mint.ids import EvalSource
from mint.objects import Evaluation
from mint.porcelain.files import checkout


def evaluate(repo, rev: str, contract: str, *, by: str) -> Evaluation:
    """Check REV out to a temporary folder, run CONTRACT's evaluator there, record it."""
    from mint.gates.evaluator import hash_data, parse_metrics, run_command

    b = backend_of(repo)
    cid = b.resolve(rev)
    c = b.contract_show(contract, line=b.log(cid, 1)[0].line)
    ev = c.evaluator
    if not ev:
        raise EvaluationFailed(
            f"contract {c.name} has no [evaluator]; record results with --metric KEY=VALUE"
        )
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
