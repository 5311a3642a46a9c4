"""Commands of the runtime: serve, route-eval, export."""

from __future__ import annotations

import contextlib
import functools
import os

import click

from mint import api
from mint.cli._common import (
    current_user,
    json_option,
    quiet_option,
    transfer_progress,
    transferred,
    with_repo,
)
from mint.cli._output import echo, emit_json, is_tty, safe, short, table, warn
from mint.cli.fleet_cmds import report_options


def quiet_libraries() -> None:
    """transformers' progress bars and peft's deprecation warnings are noise on a pipe."""
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    if not is_tty():
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()


def base_dir_option(fn):
    """`--base-dir DIR`: the base model folder. `--base DIR` still works, hidden: elsewhere
    `--base` takes a base's NAME (`commit`, `pull`), so the folder took another name."""
    folder = click.Path(exists=True, file_okay=False)

    @click.option(
        "--base-dir",
        "base_dir",
        type=folder,
        help="The base model folder (default: where `mint base add` found it).",
    )
    @click.option("--base", "old_base_dir", type=folder, hidden=True)
    @functools.wraps(fn)
    def wrapper(*args, base_dir, old_base_dir, **kwargs):
        if base_dir and old_base_dir and base_dir != old_base_dir:
            raise click.UsageError("--base is the old name of --base-dir: give one of them")
        return fn(*args, base_dir=base_dir or old_base_dir, **kwargs)

    return wrapper


def engine_options(fn):
    """`--engine embedded|vllm`, `--engine-url URL`, `--engine-key-env NAME`: where the forward
    passes run; the function receives `engine_url` (None: embedded) and `engine_key`."""

    @click.option(
        "--engine",
        type=click.Choice(["embedded", "vllm"]),
        default="embedded",
        show_default=True,
        help="Run the model here (PEFT), or on a vLLM server with mint's plugin.",
    )
    @click.option(
        "--engine-url",
        metavar="URL",
        help="The vLLM server (default with --engine vllm: start one here, on a free port).",
    )
    @click.option(
        "--engine-key-env",
        metavar="NAME",
        help="Environment variable holding the vLLM server's API key.",
    )
    @functools.wraps(fn)
    def wrapper(*args, engine, engine_url, engine_key_env, **kwargs):
        if engine_url and engine != "vllm":
            raise click.UsageError("--engine-url needs --engine vllm")
        key = os.environ.get(engine_key_env) if engine_key_env else None
        if engine_key_env and not key:
            raise click.UsageError(f"--engine-key-env: ${engine_key_env} is not set")
        return fn(*args, engine=engine, engine_url=engine_url, engine_key=key, **kwargs)

    return wrapper


def batching_options(fn):
    """`--batch-window-ms`, `--max-batch`, `--no-batching`: how concurrent requests are gathered
    into batches; the function receives `batching` (a BatchPolicy)."""

    @click.option(
        "--batch-window-ms",
        "window_ms",
        default=5.0,
        show_default=True,
        type=click.FloatRange(min=0),
        help="How long to gather requests into a batch.",
    )
    @click.option(
        "--max-batch",
        default=16,
        show_default=True,
        type=click.IntRange(min=1),
        help="The most requests run together.",
    )
    @click.option("--no-batching", is_flag=True, help="Run one request at a time.")
    @functools.wraps(fn)
    def wrapper(*args, window_ms, max_batch, no_batching, **kwargs):
        from mint.runtime.batching import BatchPolicy

        policy = BatchPolicy.off() if no_batching else BatchPolicy(window_ms / 1000, max_batch)
        return fn(*args, batching=policy, **kwargs)

    return wrapper


def token_options(fn):
    """`--token-env NAME` and `--registry-tokens`: which bearer tokens `serve` takes."""

    token_env = click.option(
        "--token-env",
        metavar="NAME",
        multiple=True,
        help="Take requests only with `Authorization: Bearer` and the token held in the "
        "environment variable NAME (every endpoint but /healthz; never printed). Repeatable: "
        "each token is a caller of its own, whose feedback the loop weighs apart.",
    )
    registry_tokens = click.option(
        "--registry-tokens",
        is_flag=True,
        help="Take the registry's own tokens (checked with the registry, cached for a "
        "minute); feedback is recorded there under the caller's token.",
    )
    return token_env(registry_tokens(fn))


def signature_options(fn):
    """`--require-signed` and `--keys NAME,...`: serve only signed versions; the function
    receives `signatures(repo, rev)`, which makes the guard and judges REV with it (None
    without --require-signed)."""

    @click.option(
        "--require-signed",
        is_flag=True,
        help="Load only versions signed by a trusted key of the repository (or registry): "
        "a set's own signature, or every member's. Checked at start and at every move.",
    )
    @click.option(
        "--keys",
        metavar="NAME,...",
        help="With --require-signed: only these trusted keys' signatures count.",
    )
    @functools.wraps(fn)
    def wrapper(*args, require_signed, keys, **kwargs):
        if keys is not None and not require_signed:
            raise click.UsageError("--keys needs --require-signed")

        def signatures(repo, rev: str):
            if not require_signed:
                return None
            from mint.runtime.signatures import SignatureGuard
            from mint.signing.policy import parse_keys

            guard = SignatureGuard.open(repo, parse_keys(keys))
            guard.check(rev)
            return guard

        return fn(*args, signatures=signatures, **kwargs)

    return wrapper


def client_checks(repo, host: str, token_env: tuple[str, ...], registry_tokens: bool) -> list:
    """The token checks `serve` applies (see `mint.runtime.auth`); a warning when it takes
    none and listens beyond this machine."""
    from mint.runtime.auth import RegistryTokens, StaticToken
    from mint.runtime.serving import is_loopback

    checks: list = []
    for name in token_env:
        secret = os.environ.get(name, "")
        if not secret.strip():
            raise click.BadParameter(
                f"the environment variable {name} is not set or is empty",
                param_hint="--token-env",
            )
        checks.append(StaticToken(secret.strip()))
    if registry_tokens:
        if not getattr(repo, "is_remote", False):
            raise click.BadParameter(
                "the repository is not a registry: there are no registry tokens to check",
                param_hint="--registry-tokens",
            )
        checks.append(RegistryTokens(repo.url))
    if not checks and not is_loopback(host):
        warn(
            f"mint: warning: serving on {host} with no token: anyone who can reach it may chat"
            " and post feedback (give --token-env NAME or --registry-tokens)"
        )
    return checks


@click.command()
@click.argument("rev")
@base_dir_option
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option(
    "--poll",
    default=0.5,
    show_default=True,
    type=float,
    help="Seconds between checks of the channel.",
)
@click.option(
    "--retry-after",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds before a version that failed to load is tried again (at once if the channel "
    "moves).",
)
@batching_options
@click.option(
    "--max-cpu-adapters",
    default=64,
    show_default=True,
    type=click.IntRange(min=0),
    help="Adapters kept loaded, versions served before included (a rollback to one is instant).",
)
@click.option("--no-traces", is_flag=True, help="Record no traces of the turns served.")
@click.option(
    "--no-trace-content", is_flag=True, help="Record traces without messages or answers."
)
@engine_options
@token_options
@signature_options
@report_options
@with_repo
def serve(
    repo,
    rev,
    base_dir,
    engine,
    engine_url,
    engine_key,
    host,
    port,
    poll,
    retry_after,
    batching,
    max_cpu_adapters,
    no_traces,
    no_trace_content,
    token_env,
    registry_tokens,
    signatures,
    report,
) -> None:
    """Serve set REV over HTTP (OpenAI-compatible); follow it when it is a channel. Each turn
    is a trace in the repository or on the registry (`mint traces`; the token needs the writer
    role); POST /v1/feedback scores it, once per completion and caller (a later score from the
    same caller replaces the earlier). SIGTERM or SIGINT: the requests in flight finish and the
    queued traces are written before the server exits."""
    quiet_libraries()
    from mint.runtime import service, serving

    serving.log_to_stderr()  # a line per swap, canary start and stop, and reconnect
    checks = client_checks(repo, host, token_env, registry_tokens)
    check_port(host, port)
    guard = signatures(repo, rev)  # REV judged: one line before a vLLM server or base starts
    with engine_at(engine, engine_url, repo, rev, base_dir) as url:
        runtime = service.open_runtime(
            repo,
            rev,
            base_dir,
            poll_interval=poll,
            batching=batching,
            max_cpu_adapters=max_cpu_adapters,
            traces=not (no_traces or reader_records_nothing(repo)),
            trace_content=not no_trace_content,
            engine_url=url,
            engine_key=engine_key,
            signatures=guard,
        )
        runtime.retry_after = retry_after  # before the follower starts
        on = f" on vLLM at {url}" if url else ""
        warn(f"mint: serving {rev} ({short(runtime.active.id)}){on} on http://{host}:{port}")
        serve_until_stopped(runtime, host, port, checks, report(runtime, repo, rev))


def reader_records_nothing(repo) -> bool:
    """Whether REPO is a registry reached with a reader's token, which records no traces
    there (said in one warning)."""
    if getattr(repo, "is_remote", False) and repo.whoami()["role"] == "reader":
        warn("mint: a reader's token records no traces on the registry (a writer's does)")
        return True
    return False


def serve_until_stopped(runtime, host: str, port: int, checks: list, reporter=None) -> None:
    """Follow the channel and serve until SIGTERM or SIGINT; then close everything (the
    reporter says goodbye, so that the instance is shown stopped, not stale)."""
    from mint.runtime.serving import serve as run_server

    runtime.follow()
    try:
        stopped_by = run_server(runtime, host, port, checks=checks, log_level="warning")
    finally:
        if reporter is not None:
            reporter.close(goodbye=True)
        runtime.close()
        for check in checks:
            getattr(check, "close", lambda: None)()
    recorder = runtime.recorder
    if stopped_by:
        kept = f"; traces: {recorder.stats()}" if recorder is not None else ""
        warn(f"mint: stopped on {stopped_by}: requests in flight finished{kept}")


def check_port(host: str, port: int) -> None:
    """Refuse a taken port before any model is loaded."""
    import socket

    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise click.ClickException(f"cannot serve on {host}:{port}: {exc.strerror}") from None


@contextlib.contextmanager
def engine_at(engine: str, url: str | None, repo, rev: str, base_dir: str | None):
    """The vLLM server's URL (None: the embedded engine). `--engine vllm` without
    `--engine-url` starts one here, stopped when the block ends (one line when vLLM is not
    installed)."""
    if engine != "vllm" or url is not None:
        yield url
        return
    from mint.runtime.vllm_server import start_server

    server = start_server(repo, rev, base_dir)
    try:
        yield server.url
    finally:
        server.stop()


@click.command("route-eval")
@click.argument("rev")
@click.option(
    "--data",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help='JSONL: {"messages": [...], "label": ...} per line.',
)
@click.option(
    "--contract",
    "contract_name",
    help="Record route_accuracy as an evaluation under this contract.",
)
@base_dir_option
@engine_options
@json_option
@with_repo
def route_eval(
    repo, rev, data, contract_name, base_dir, engine, engine_url, engine_key, as_json
) -> None:
    """Routing accuracy of set REV on labelled requests, with the confusion matrix."""
    quiet_libraries()
    from mint.runtime.service import route_eval as run

    with engine_at(engine, engine_url, repo, rev, base_dir) as url:
        r = run(
            repo,
            rev,
            data,
            base_dir=base_dir,
            contract=contract_name,
            by=current_user(),
            engine_url=url,
            engine_key=engine_key,
        )
    if as_json:
        return emit_json(r)
    echo(
        f"route accuracy of {short(r.set_id)}: {r.accuracy:.4f} on {r.n} requests"
        f" ({r.fallbacks} fell back to the default)"
    )
    labels = list(r.confusion)
    predicted = list(next(iter(r.confusion.values())).keys()) if r.confusion else []
    echo(
        table(
            [[a, *[r.confusion[a].get(b, 0) for b in predicted]] for a in labels],
            ["LABEL \\ ROUTED", *predicted],
        )
    )
    if r.evaluation:
        e = r.evaluation
        echo(f"recorded evaluation {e.id} under {e.contract} v{e.version}")


@click.command("export")
@click.argument("rev")
@click.argument("directory", type=click.Path())
@click.option(
    "--format", "fmt", type=click.Choice(["peft", "vllm"]), default="peft", show_default=True
)
@json_option
@quiet_option
@with_repo
def export_cmd(repo, rev, directory, fmt, as_json, quiet) -> None:
    """Write REV as PEFT folders, or ready for vLLM (--format vllm)."""
    with transfer_progress("export", quiet, as_json) as progress:
        r = api.export(repo, rev, fmt, directory, progress=progress)
        progress.close()
        if as_json:
            return emit_json(r)
        also = f"; also {', '.join(r.files)}" if r.files else ""
        echo(
            f"exported {short(r.id)} as {r.format} into {safe(r.path)}: "
            f"{transferred(progress, 'export')}; adapters {', '.join(r.adapters)}{also}"
        )


def register(cli: click.Group) -> None:
    for command in (serve, route_eval, export_cmd):
        cli.add_command(command)
