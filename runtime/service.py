"""The runtime over a repository: what `mint serve` and `mint route-eval` call.

This module joins mint's public API (revisions, sets, the store, contracts) to the runtime's
pieces; the CLI stays a thin layer over it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
from pathlib import Path

from mint import api
from mint.db import Database
from mint.errors import BaseFolderUnknown, InvalidConfig, WrongKind
from mint.ids import EvalSource
from mint.objects import SetSpec
from mint.repo import Repo
from mint.runtime.batching import BatchPolicy
from mint.runtime.engine import open_engine
from mint.runtime.evaluate import RouteEval, evaluate_routes, read_records
from mint.runtime.loader import SharedBase
from mint.runtime.packed import pack_loader
from mint.runtime.runtime import Runtime
from mint.runtime.signatures import SignatureGuard, loading
from mint.runtime.traces import TraceRecorder, TracesDeferred, through_registry

LOCK_WAIT = 1.0  # seconds a trace or feedback write waits for another process's lock
log = logging.getLogger("mint.runtime")

FALLBACK_POLL = 60.0  # seconds between checks of a channel followed through events


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


class ChannelWatch:
    """A `Watch` over a registry's event stream: nudges the follower on each move of REV's
    ref (a channel, tag or line head), on each start and stop of a canary on REV's channel
    (whose events name the line and the channel too), and each time the stream (re)connects,
    since events may have been missed while it was down."""

    def __init__(self, repo, rev: str):
        from mint.remote.events import EventStream

        line, _, name = rev.partition("@")
        self.line, self.name = line, name or line
        self.stream = EventStream(repo.url, repo.token, tail=True, label=rev)

    def run(self, nudge) -> None:
        def on_event(event: dict) -> None:
            data = event.get("data") or {}
            if data.get("line") == self.line and data.get("name") == self.name:
                nudge()

        self.stream.follow(on_event, on_connect=nudge)

    def close(self) -> None:
        self.stream.close()


def watch_for(repo, rev: str, poll_interval: float) -> tuple[ChannelWatch | None, float]:
    """How to follow REV: a registry's event stream (polling only every minute, as a
    fallback), or polling a local repository every POLL_INTERVAL seconds."""
    if not getattr(repo, "is_remote", False) or "~" in rev or "^" in rev:
        return None, poll_interval
    return ChannelWatch(repo, rev), max(poll_interval, FALLBACK_POLL)


def open_runtime(
    repo: Repo,
    rev: str,
    base_dir: str | None = None,
    *,
    poll_interval: float = 0.5,
    batching: BatchPolicy | None = None,
    max_cpu_adapters: int = 0,
    traces: bool = True,
    trace_content: bool = True,
    engine_url: str | None = None,
    engine_key: str | None = None,
    signatures: SignatureGuard | None = None,
) -> Runtime:
    """Load REV's set onto the base and keep following REV (a channel, tag or line): on a
    registry through its event stream, in a local repository by polling.

    `batching`: how requests are gathered; `max_cpu_adapters`: the most kept loaded (retired too).
    `traces`: record each turn in the repository's database, or the registry's (see
    `recorder_for`), with the messages and the answer unless `trace_content` is False.
    `engine_url`: every forward pass on the vLLM server there (with mint's plugin, which
    fetches and verifies the adapters; `engine_key` its API key), not in this process.
    `signatures`: serve only what it passes, from the CPU tier too (`loading`)."""
    spec, load_spec, metrics = loading(repo, rev, signatures)
    watch, poll_interval = watch_for(repo, rev, poll_interval)
    base, load, verify = engine_for(
        base_dir_for(repo, spec, base_dir), repo, engine_url, engine_key
    )
    runtime = Runtime(
        base,
        verify=verify,
        load=load,
        resolve=lambda: api.resolve(repo, rev),
        load_spec=load_spec,
        metrics=metrics,
        poll_interval=poll_interval,
        batching=batching,
        max_cpu_adapters=max_cpu_adapters,
        watch=watch,
    )
    runtime.variant, runtime.rev = variant_name(rev), rev
    runtime.admit = signatures.check if signatures is not None else None
    runtime.recorder = recorder_for(repo, content=trace_content) if traces else None
    if runtime.recorder is not None:
        runtime.metrics.traces = runtime.recorder.stats
    runtime.canary_of = canary_reader(repo, rev)
    runtime.stage(spec)
    runtime.swap()
    first_canary(runtime, rev)
    return runtime


def first_canary(runtime: Runtime, rev: str) -> None:
    """Split off the open canary of REV's channel, if any (a failure leaves it for later)."""
    try:
        runtime.poll_canary()
    except Exception as exc:  # noqa: BLE001 - the holder serves; the follower tries again
        log.warning("reading the canary of %s: %s", rev, exc)


def engine_for(base_dir: str, repo, engine_url: str | None, engine_key: str | None):
    """(base, load, verify) for a Runtime: the base loaded here and every blob re-hashed
    before a version is staged (a set of a local repository from its pack, `packed`), or a
    vLLM server at ENGINE_URL (its plugin verifies)."""
    if engine_url is None:
        base, verify = SharedBase.load(base_dir), store_verifier(repo)
        local = not getattr(repo, "is_remote", False)
        return base, pack_loader(repo, base, verify) if local else None, verify
    from mint.runtime.vllm_engine import VllmBase, load_vllm_engine

    base = VllmBase(engine_url, base_dir, api_key=engine_key)
    return base, functools.partial(load_vllm_engine, base), None


def canary_reader(repo, rev: str):
    """`canary_of()` for a runtime following REV: the open canary of a channel, read from the
    repository or through the registry; None (no split) for a tag or a line head."""
    line, _, channel = rev.partition("@")
    if not channel or any(c in rev for c in "~^"):
        return None
    return lambda: api.canary_of(repo, rev)


def variant_name(rev: str) -> str:
    """What traces of the holder of REV say served them: a channel's name, else REV."""
    _, _, name = rev.partition("@")
    return (name if name and not any(c in name for c in "~^") else rev)[:100]


def recorder_for(repo, *, content: bool = True) -> TraceRecorder:
    """A recorder writing to REPO's database, or through a registry with the token (which
    needs the writer role; a refused token drops traces, with one warning). On a registry,
    a batch's malformed rows are skipped and named by the registry, the others written; a
    client's feedback given with a registry token of its own is recorded under that token.

    Locally it writes through a pool of its own that waits at most LOCK_WAIT seconds for a
    lock another process holds: a batch that cannot be written then is tried again later,
    and feedback answers "try again later" rather than hold its request."""
    if getattr(repo, "is_remote", False):
        return _registry_recorder(repo, content)
    quick = dataclasses.replace(repo, db=Database(repo.db.url))
    quick.db.limit_lock_wait(LOCK_WAIT)

    def write(rows):
        return api.write_traces(quick, rows)

    def feedback(trace_id, score, label=None, *, by=None):
        return api.record_feedback(quick, trace_id, score, label, by=by)

    return TraceRecorder(write, feedback=feedback, content=content, on_close=quick.db.dispose)


def _registry_recorder(repo, content: bool) -> TraceRecorder:
    from mint.remote import traces_ops

    def write(rows):
        return traces_ops.write_traces_skipping(repo, rows)

    def feedback(trace_id, score, label=None, *, by=None, token=None):
        if token is not None:  # the client's own token: its refusal is the client's (403)
            as_client = through_registry(traces_ops.record_feedback_as, own_token=False)
            return as_client(repo, token, trace_id, score, label)
        return through_registry(api.record_feedback)(repo, trace_id, score, label, by=by)

    return TraceRecorder(
        through_registry(write), feedback=feedback, content=content, busy=TracesDeferred
    )


def route_eval(
    repo: Repo,
    rev: str,
    data: str,
    *,
    base_dir: str | None = None,
    contract: str | None = None,
    by: str,
    engine_url: str | None = None,
    engine_key: str | None = None,
) -> RouteEval:
    """Routing accuracy of REV's router on labelled requests; recorded under CONTRACT if given."""
    spec = api.set_spec(repo, rev)
    if spec.single:
        raise WrongKind(f"{rev} is an adapter commit, not a set: route-eval needs a set's router")
    records = list(read_records(data))
    if not records:
        raise InvalidConfig(f"{data} holds no labelled requests")
    folder = base_dir_for(repo, spec, base_dir)
    if engine_url is None:
        engine = open_engine(folder, spec, verify=store_verifier(repo))
    else:
        base, load, _ = engine_for(folder, repo, engine_url, engine_key)
        engine = load(spec)
    try:
        result = evaluate_routes(engine, records)
    finally:
        engine.close()
        getattr(engine.base, "close", lambda: None)()  # a vLLM base: its connections
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
