"""`mint fleet`: what serves each channel, as the serving processes report it, and the served
history; `--wait` (promote, rollback, canary start) waits until the fleet serves the move."""

from __future__ import annotations

import datetime as dt
import functools

import click

from mint import api
from mint.cli._common import current_user, json_option, with_repo
from mint.cli._output import echo, emit_json, safe, short, table

WAIT_TIMEOUT = 300.0


class _ShowByDefault(click.Group):
    """`mint fleet [LINE@CHANNEL]` is `mint fleet show [LINE@CHANNEL]`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("-h", "--help")):
            args = ["show", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_ShowByDefault)
def fleet() -> None:
    """What serves: every instance that reports (mint serve, vLLM's mint plugin), what it
    serves and since when, and whether that is what its channel holds."""


def ago(when: str | None, now: dt.datetime | None = None) -> str:
    """An ISO time as a person says it: `12 s ago`, `3 min ago`, `2 h ago`, `4 d ago`."""
    if not when:
        return "-"
    now = now or dt.datetime.now(dt.UTC)
    seconds = max((now - dt.datetime.fromisoformat(when)).total_seconds(), 0.0)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return f"{int(seconds)} s ago"


def _state(m) -> str:
    if m.state == "stale":
        return f"STALE: last report {ago(m.seen_at)}"
    if m.state == "stopped":
        return f"stopped {ago(m.seen_at)}"
    failed = m.failure is not None and not m.holder
    if failed:
        f = m.failure
        return f"FAILING: {f.kind}: {f.reason} ({ago(f.at)}, staging {short(f.commit)})"
    return "serves the holder" if m.holder else f"OFF the holder since {ago(m.off_since)}"


def _served(m) -> str:
    text = short(m.commit)
    if m.canary:
        text += f" + canary {short(m.canary)} at {m.fraction:g}"
    return text


def _heading(v) -> str:
    moved = f", moved {ago(v.moved_at)}" if v.moved_at else ""
    text = f"{v.name}: holder {short(v.holder)}{moved}; {v.serving}/{v.live} live serve it"
    if v.canary:
        text += f"; canary {short(v.canary)} at {v.fraction:g}"
    return text


@fleet.command("show")
@click.argument("ref", metavar="[LINE@CHANNEL]", required=False)
@json_option
@with_repo
def show(repo, ref, as_json) -> None:
    """Every instance following LINE@CHANNEL (default: every name followed): what it serves,
    since when, and whether it is the holder; stale and failing ones with their reason."""
    views = api.fleet(repo, ref)
    if as_json:
        return emit_json(views)
    if not views:
        echo("no serving instance has reported")
    for i, v in enumerate(views):
        echo(("\n" if i else "") + safe(_heading(v)))
        rows = [[m.instance, m.engine, _served(m), ago(m.since), _state(m)] for m in v.members]
        if rows:
            echo(table(rows, ["INSTANCE", "ENGINE", "SERVES", "SINCE", "STATE"]))


@fleet.command("history")
@click.argument("ref", metavar="LINE@CHANNEL")
@click.option(
    "--at",
    metavar="TIME",
    help="Only what answered at that moment (an ISO 8601 time, or an age: 10m, 2h, 1d).",
)
@json_option
@with_repo
def history(repo, ref, at, as_json) -> None:
    """What each instance served for LINE@CHANNEL, from when to when; `(unseen)` rows are
    gaps, where the instance did not report. With --at, which commits answered then, where."""
    found = api.fleet_history(repo, ref, at=at)
    if as_json:
        return emit_json(found)
    if at is not None:
        rows = [[x.instance, x.commit, _role(x)] for x in found]
        return echo(table(rows, ["INSTANCE", "COMMIT", "AS"]))
    echo(table(_history_rows(found), ["INSTANCE", "COMMIT", "AS", "FROM", "UNTIL"]))


def _role(x) -> str:
    return f"canary at {x.fraction:g}" if x.canary else "holder"


def _until(x) -> str:
    if x.until:
        return x.until[:19]
    seen = (x.last_seen or "")[:19]
    return f"unseen since {seen}" if x.stale else f"now (last report {seen})"


def _history_rows(found) -> list[list[str]]:
    """One row per stretch, and an `(unseen)` row where an instance's next stretch begins
    after the last one ended."""
    rows, last = [], {}
    for x in found:
        key = (x.instance, x.canary)
        before = last.get(key)
        if before is not None and before.until and before.until < x.start:
            rows.append([x.instance, "(unseen)", "", before.until[:19], x.start[:19]])
        rows.append([x.instance, x.commit, _role(x), x.start[:19], _until(x)])
        last[key] = x
    return rows


# --- --wait, for promote, rollback and canary start ---------------------------------------


def wait_options(fn):
    """`--wait` and `--timeout SECONDS`: the function receives `wait` (None, or the seconds)."""

    @click.option(
        "--wait",
        is_flag=True,
        help="Then wait until every live instance following the channel serves it (exit "
        "status 4 at the timeout, naming each instance that does not, with its last failure).",
    )
    @click.option(
        "--timeout",
        type=click.FloatRange(0),
        metavar="SECONDS",
        help=f"With --wait: how long to wait.  [default: {WAIT_TIMEOUT:g}]",
    )
    @functools.wraps(fn)
    def wrapper(*args, wait, timeout, **kwargs):
        if timeout is not None and not wait:
            raise click.UsageError("--timeout needs --wait")
        seconds = (timeout if timeout is not None else WAIT_TIMEOUT) if wait else None
        return fn(*args, wait=seconds, **kwargs)

    return wrapper


def waited(repo, ref: str, target: str, timeout: float, as_json: bool, **canary):
    """Wait for the fleet of REF to serve TARGET (`api.fleet_wait`) and say how it went."""
    done = api.fleet_wait(repo, ref, target, timeout=timeout, **canary)
    if not as_json:
        left = f" (left out: {', '.join(done.excluded)})" if done.excluded else ""
        if not done.instances:
            echo(f"{ref}: no live instance follows it{left}")
        else:
            n, what = len(done.instances), "the canary" if done.canary else short(target)
            echo(f"{ref}: {n}/{n} live instances serve {what} after {done.seconds:.2f} s{left}")
    return done


# --- serve's reports of what it serves ------------------------------------------------------


def report_options(fn):
    """`--instance NAME`, `--report-interval SECONDS`, `--no-report`: what `serve` tells the
    repository or registry it follows about what it serves (docs/fleet.md); the function
    receives `report(runtime, repo, rev)`, which starts the reporter (None: --no-report)."""

    @click.option(
        "--instance",
        metavar="NAME",
        help="This server's name in `mint fleet` (default: HOST:PORT; the machine's name for "
        "a host of 0.0.0.0).",
    )
    @click.option(
        "--report-interval",
        type=click.FloatRange(0.1, 3600),
        default=10.0,
        show_default=True,
        metavar="SECONDS",
        help="Report what it serves this often, and at once on every switch or failure; "
        "unseen for three intervals, it is shown stale (`mint fleet`).",
    )
    @click.option("--no-report", is_flag=True, help="Report nothing about what it serves.")
    @functools.wraps(fn)
    def wrapper(*args, instance, report_interval, no_report, **kwargs):
        if no_report and instance:
            raise click.UsageError("--instance names the reports: not with --no-report")
        where = (kwargs["host"], kwargs["port"], kwargs["engine"])
        settings = None if no_report else (instance, report_interval)

        def report(runtime, repo, rev: str):
            return start_reports(runtime, repo, rev, *where, settings)

        return fn(*args, report=report, **kwargs)

    return wrapper


def start_reports(runtime, repo, rev: str, host: str, port: int, engine: str, report):
    """The fleet reporter of `serve` (None with --no-report)."""
    if report is None:
        return None
    from mint.fleet.reporter import instance_name
    from mint.runtime.fleet import start_reporting

    name, interval = report
    name = name or instance_name(host, port)
    return start_reporting(
        runtime, repo, rev, instance=name, engine=engine, interval=interval, by=current_user()
    )


def register(cli: click.Group) -> None:
    cli.add_command(fleet)
