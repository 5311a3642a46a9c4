"""Commands of traces and datasets: `mint traces ls`, `mint traces export`, `mint traces
feedback` and `mint dataset show`."""

from __future__ import annotations

import functools

import click

from mint import api
from mint.cli._common import current_user, json_option, with_repo
from mint.cli._output import echo, emit_json, safe, short, table


def filter_options(fn):
    """`--set`, `--since`, `--label`, `--min-score`, `--variant`: which traces."""

    @click.option("--set", "set_rev", metavar="REV", help="A set line, or one set revision.")
    @click.option("--since", metavar="TIME", help="ISO 8601 time, or an age: 30m, 2h, 1d.")
    @click.option("--label", metavar="LABEL", help="Only turns routed to this expert.")
    @click.option(
        "--min-score",
        type=click.FloatRange(0, 1),
        metavar="S",
        help="Only turns whose latest feedback scored at least S.",
    )
    @click.option("--variant", metavar="V", help="production (the channel), canary, ...")
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


@click.group()
def traces() -> None:
    """Turns the runtime served (`mint serve` records them), and feedback on them."""


@traces.command("ls")
@filter_options
@click.option("--limit", "-n", default=100, show_default=True, type=click.IntRange(min=0))
@json_option
@with_repo
def ls(repo, set_rev, since, label, min_score, variant, limit, as_json) -> None:
    """Recorded turns, newest first, with their latest feedback."""
    found = api.traces_ls(
        repo,
        set_rev=set_rev,
        since=since,
        label=label,
        min_score=min_score,
        variant=variant,
        limit=limit,
    )
    if as_json:
        return emit_json(found)
    rows = [
        [
            t.id,
            t.at[:19],
            short(t.set_commit),
            t.variant,
            t.label or "-",
            "-" if t.score is None else f"{t.score:.2f}",
            t.feedback_label or "-",
            f"{1000 * t.latency.get('total', 0.0):.0f}",
        ]
        for t in found
    ]
    headers = ["ID", "AT", "SET", "VARIANT", "ROUTED", "SCORE", "SHOULD", "MS"]
    echo(safe(table(rows, headers)) if rows else "no traces")


@traces.command("export")
@filter_options
@click.option(
    "--format", "fmt", type=click.Choice(["chat", "router"]), default="chat", show_default=True
)
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False))
@click.option("--limit", "-n", type=click.IntRange(min=0), help="At most N turns (default: all).")
@json_option
@with_repo
def export(repo, set_rev, since, label, min_score, variant, fmt, out, limit, as_json) -> None:
    """Write turns as JSONL (chat: for an expert's SFT; router: routing examples) and keep the
    file as a dataset named by its sha256 (use it in `mint commit --meta data=SHA256`)."""
    d = api.traces_export(
        repo,
        out,
        format=fmt,
        set_rev=set_rev,
        since=since,
        label=label,
        min_score=min_score,
        variant=variant,
        limit=limit,
        by=current_user(),
    )
    if as_json:
        return emit_json(d)
    echo(f"exported {d.records} {d.format} records to {safe(d.path)} ({d.size:,} bytes)")
    echo(f"dataset sha256:{d.id}")


@traces.command("feedback")
@click.argument("trace_id")
@click.argument("score", type=float)
@click.option("--label", metavar="LABEL", help="The expert that should have answered.")
@json_option
@with_repo
def feedback(repo, trace_id, score, label, as_json) -> None:
    """Record feedback on a turn: SCORE from 0 to 1 (what POST /v1/feedback does)."""
    t = api.record_feedback(repo, trace_id, score, label, by=current_user())
    if as_json:
        return emit_json(t)
    echo(
        f"feedback on {t.id}: score {t.score:.2f}"
        + (f", should be {t.feedback_label}" if t.feedback_label else "")
    )


@click.group("dataset")
def dataset() -> None:
    """Exports of traces kept in the store."""


@dataset.command("show")
@click.argument("dataset_id")
@json_option
@with_repo
def dataset_show(repo, dataset_id, as_json) -> None:
    """A dataset by its sha256 (or 7 or more of its first hex digits)."""
    d = api.dataset_show(repo, dataset_id)
    if as_json:
        return emit_json(d)
    fields = [
        ("dataset", f"sha256:{d.id}"),
        ("format", d.format),
        ("records", d.records),
        ("size", f"{d.size:,} bytes"),
        ("filters", " ".join(f"{k}={v}" for k, v in d.filters.items()) or "-"),
        ("created", f"{d.created_at} by {d.created_by}"),
    ]
    for name, value in fields:
        echo(f"{name + ':':<9} {safe(value)}")


def register(cli: click.Group) -> None:
    cli.add_command(traces)
    cli.add_command(dataset)
