"""The runtime over a repository: what `mint serve` and `mint route-eval` call.

This module joins mint's public API (revisions, sets, the store, contracts) to the runtime's
pieces; the CLI stays a thin layer over it.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from mint import api
from mint.errors import BaseFolderUnknown, InvalidConfig
from mint.ids import EvalSource
from mint.objects import SetSpec
from mint.repo import Repo
from mint.runtime.batching import BatchPolicy
from mint.runtime.engine import open_engine
from mint.runtime.evaluate import RouteEval, evaluate_routes, read_records
from mint.runtime.loader import SharedBase
from mint.runtime.swap import Runtime


def store_verifier(repo: Repo):
    """`verify(spec)`: re-hash every blob the set uses, prompts and members' files alike
    (BlobCorrupt/BlobMissing)."""

    def verify(spec: SetSpec) -> None:
        for blob in spec.blobs:
            repo.store.verify(blob)

    return verify


def base_dir_for(repo: Repo, spec: SetSpec, base_dir: str | None) -> str:
    """The base's folder: as given, else where `mint base add` found it."""
    if base_dir:
        return base_dir
    source = next((b.source for b in api.base_ls(repo) if b.name == spec.base), None)
    if not source:
        raise BaseFolderUnknown(spec.base)
    path = Path(source)
    return str(path.parent if path.name == "config.json" else path)


def open_runtime(
    repo: Repo,
    rev: str,
    base_dir: str | None = None,
    *,
    poll_interval: float = 0.5,
    batching: BatchPolicy | None = None,
    max_cpu_adapters: int = 0,
) -> Runtime:
    """Load REV's set onto the base and keep following REV (a channel, tag or line).

    `batching` says how concurrent requests are gathered (default: `BatchPolicy()`);
    `max_cpu_adapters` bounds the adapters kept loaded, retired versions' included."""
    spec = api.set_spec(repo, rev)
    runtime = Runtime(
        SharedBase.load(base_dir_for(repo, spec, base_dir)),
        verify=store_verifier(repo),
        resolve=lambda: api.resolve(repo, rev),
        load_spec=lambda commit: api.set_spec(repo, commit),
        poll_interval=poll_interval,
        batching=batching,
        max_cpu_adapters=max_cpu_adapters,
    )
    runtime.stage(spec)
    runtime.swap()
    return runtime


def route_eval(
    repo: Repo,
    rev: str,
    data: str,
    *,
    base_dir: str | None = None,
    contract: str | None = None,
    by: str,
) -> RouteEval:
    """Routing accuracy of REV's router on labelled requests; recorded under CONTRACT if given."""
    spec = api.set_spec(repo, rev)
    records = list(read_records(data))
    if not records:
        raise InvalidConfig(f"{data} holds no labelled requests")
    engine = open_engine(base_dir_for(repo, spec, base_dir), spec, verify=store_verifier(repo))
    try:
        result = evaluate_routes(engine, records)
    finally:
        engine.close()
    if not contract:
        return result
    evaluation = api.record_evaluation(
        repo,
        spec.id,
        contract,
        {"route_accuracy": result.accuracy},
        source=EvalSource.ROUTE_EVAL,
        evaluator={"command": ["mint", "route-eval"], "records": result.n},
        data_hash=hashlib.sha256(Path(data).read_bytes()).hexdigest(),
        by=by,
    )
    return dataclasses.replace(result, evaluation=evaluation)
