"""Commands of the loop that learns from deployment: candidates, improve."""

from __future__ import annotations

import time

import click

from mint import api
from mint.cli._common import current_user, json_option, with_repo
from mint.cli._output import echo, emit_json, short, table
from mint.cli.runtime_cmds import base_dir_option

merge_option = click.option(
    "--merge",
    "merges",
    multiple=True,
    type=click.Choice(("linear", "ties", "dare_linear", "dare_ties", "svd", "cat")),
    help="Also propose merges of each member with its line's newer head by this method "
    "(repeatable; docs/merge.md).",
)


@click.command("candidates")
@click.argument("ref", metavar="SET_LINE@CHANNEL")
@click.option(
    "--line",
    "lines",
    multiple=True,
    metavar="LINE",
    help="Only swap in this member line's head (repeatable; default: every member's line).",
)
@merge_option
@json_option
@with_repo
def candidates(repo, ref, lines, merges, as_json) -> None:
    """Configurations one step from the channel's holder: each member line's newest commit
    swapped in, one at a time and all together; with --merge, a merge of a member with its
    line's newest commit (by each method given)."""
    items = api.candidates(repo, ref, list(lines) or None, merges=list(merges))
    if as_json:
        return emit_json(items)
    if not items:
        return echo(f"no candidates: every member of {ref} is its line's newest commit")
    rows = [
        ["+".join(c.lines), _changes(c), short(c.existing) if c.existing else "-"] for c in items
    ]
    echo(table(rows, ["LINES", "CHANGES", "COMMITTED"]))


def _changes(c) -> str:
    """What a candidate changes: label=commit, or label=METHOD(INPUTS) for a merge to make."""
    made = [f"{label}={short(c.members[label])}" for label in c.changed]
    todo = [
        f"{label}={m['recipe']['method']}({'+'.join(short(i) for i in m['recipe']['inputs'])})"
        for label, m in c.merges.items()
        if label not in c.changed
    ]
    return " ".join(made + todo)


def route_evaluator(data: str, base_dir: str | None):
    """An `evaluate` hook for the loop: the runtime's routing accuracy of each candidate's
    router on DATA, recorded under the contract (the core cannot load models itself)."""
    from mint.cli.runtime_cmds import quiet_libraries
    from mint.runtime.service import route_eval

    quiet_libraries()

    def evaluate(repo, rev: str, contract: str, *, by: str):
        return route_eval(repo, rev, data, base_dir=base_dir, contract=contract, by=by).evaluation

    return evaluate


def _render(r) -> None:
    echo(f"round on {r.line} under {r.contract}: {r.outcome}")
    for s in r.steps:
        where = f" {s.channel}" if s.channel else ""
        echo(f"  {s.action}{where} {short(s.commit)}: {s.detail}")


@click.command("improve")
@click.argument("line", metavar="SET_LINE")
@click.option(
    "--contract",
    "contract_name",
    required=True,
    help="Evaluate candidates under it: a contract for staging (candidates are staged first) "
    "or for the target channel itself (no staging step).",
)
@click.option(
    "--to",
    "target",
    default="production",
    show_default=True,
    metavar="CHANNEL",
    help="The channel the loop improves: canaries run against it.",
)
@click.option(
    "--line", "lines", multiple=True, metavar="LINE", help="Only try this member line's head."
)
@click.option(
    "--canary",
    "fraction",
    type=float,
    default=0.1,
    show_default=True,
    help="The canary's share of the target channel's requests.",
)
@click.option(
    "--min-traces",
    type=click.IntRange(min=1),
    help="Scored traces each variant needs (default: the contract's [live] min_traces, or 20).",
)
@click.option(
    "--eval-data",
    type=click.Path(exists=True, dir_okay=False),
    help="Evaluate each candidate's routing accuracy on this JSONL (as route-eval does) "
    "instead of running the contract's evaluator.",
)
@merge_option
@base_dir_option
@click.option(
    "--retry",
    metavar="SET_REV",
    help="Start the loop's canary of this set again, as you (one the loop rejected too): "
    "gated and staged as a candidate; history records the retry.",
)
@click.option("--reason", help="Why (with --retry; recorded in history).")
@click.option("--watch", is_flag=True, help="Keep running rounds until interrupted.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds between rounds with --watch.",
)
@json_option
@with_repo
def improve(
    repo,
    line,
    contract_name,
    target,
    lines,
    fraction,
    min_traces,
    eval_data,
    merges,
    base_dir,
    retry,
    reason,
    watch,
    interval,
    as_json,
) -> None:
    """One round of the loop on SET_LINE: judge the live floor and an open canary, or evaluate
    the candidates, stage the best (with a staging contract) and start its canary against the
    target channel (--to, production by default)."""
    evaluate = route_evaluator(eval_data, base_dir) if eval_data else None
    kwargs = dict(contract=contract_name, to=target, lines=lines, canary=fraction)
    kwargs |= dict(min_traces=min_traces)
    kwargs |= dict(evaluate=evaluate)
    if merges:
        from mint.cli.merge_cmds import combiner

        kwargs |= dict(merges=merges, combine=combiner(), base_dir=base_dir)
    if retry is not None or reason is not None:
        if retry is None or watch:
            raise click.UsageError("--reason goes with --retry, and --retry runs once")
        kwargs |= dict(retry=retry, reason=reason, by=current_user())
    try:
        _rounds(repo, line, kwargs, as_json, interval if watch else None)
    except KeyboardInterrupt:  # --watch ends here; each step of a round is its own
        # transaction, and the next round resumes a round cut short (rounds are idempotent)
        return


def _rounds(repo, line, kwargs, as_json, interval) -> None:
    """One round, or with INTERVAL one every INTERVAL seconds, printed when it differs."""
    shown = None
    while True:
        r = api.improve(repo, line, **kwargs)
        if as_json:
            emit_json(r)
        elif (r.outcome, r.steps) != shown:
            _render(r)
        shown = (r.outcome, r.steps)
        if interval is None:
            return
        click.get_text_stream("stdout").flush()
        time.sleep(interval)


def register(cli: click.Group) -> None:
    for command in (candidates, improve):
        cli.add_command(command)
