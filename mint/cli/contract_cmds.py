"""Commands of evaluation contracts and evaluations: contract add|show|ls, eval."""

from __future__ import annotations

import click

from mint import api
from mint.cli._common import current_user, json_option, parse_pairs, with_repo
from mint.cli._output import echo, emit_json, short, table


@click.group()
def contract() -> None:
    """Evaluation contracts, versioned by content."""


@contract.command("add")
@click.argument("file", type=click.Path())
@json_option
@with_repo
def contract_add(repo, file, as_json) -> None:
    """Add the contract in FILE, or a new version of it."""
    r = api.contract_add(repo, file, by=current_user())
    if as_json:
        return emit_json(r)
    c = r.contract
    state = "added" if r.created else "unchanged"
    echo(f"contract {c.name} v{c.version} ({state}) guards channel {c.channel}: {short(c.id)}")


@contract.command("show")
@click.argument("name")
@click.option("--version", "version", type=int, help="A specific version (default: the latest).")
@click.option(
    "--line", "line", help="Of the contracts named NAME for several teams, the one for LINE."
)
@json_option
@with_repo
def contract_show(repo, name, version, line, as_json) -> None:
    """One contract version."""
    c = api.contract_show(repo, name, version, line)
    if as_json:
        return emit_json(c)
    echo(f"contract {c.name} v{c.version}  ({c.id})")
    echo(f"channel:   {c.channel}\nrequires:  {', '.join(c.requires) or '-'}")
    echo(f"lines:     {', '.join(c.lines) if c.lines else 'every line'}")
    evaluator = _evaluator_text(c.evaluator)
    echo(f"approvals: {c.approvals}\nevaluator: {evaluator}")
    for m in c.metrics:
        bounds = " ".join(f"{k}={v:g}" for k, v in m.items() if k != "name")
        echo(f"  metric {m['name']} {bounds}")
    if c.signature and c.signature["required"]:
        echo(f"signature: required, by {' or '.join(c.signature['keys']) or 'a trusted key'}")


def _evaluator_text(ev: dict | None) -> str:
    if not ev:
        return "-"
    if "harness" in ev:
        extra = "".join(f" {k}={ev[k]}" for k in ("include", "limit", "num_fewshot") if k in ev)
        return f"{ev['harness']} tasks={','.join(ev['tasks'])}{extra}"
    return " ".join(ev["command"])


@contract.command("ls")
@json_option
@with_repo
def contract_ls(repo, as_json) -> None:
    """The latest version of every contract."""
    items = api.contract_ls(repo)
    if as_json:
        return emit_json(items)
    rows = [[c.name, f"v{c.version}", c.channel, len(c.metrics)] for c in items]
    echo(table(rows, ["NAME", "VERSION", "CHANNEL", "METRICS"]))


def checks_table(rows) -> str:
    """A gate's or an evaluation's checks, one row each."""
    cells = [[c.check, c.required, c.found, "pass" if c.ok else "FAIL"] for c in rows]
    return table(cells, ["CHECK", "REQUIRED", "FOUND", "RESULT"])


@click.command("eval")
@click.argument("rev")
@click.option("--contract", "contract_name", required=True, help="The contract to evaluate under.")
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    metavar="KEY=VALUE",
    help="Record a value computed elsewhere.",
)
@click.option(
    "--from",
    "harness_file",
    nargs=2,
    metavar="HARNESS FILE",
    help="Record the scores a harness wrote: lm-eval's results_*.json or inspect's log "
    "(HARNESS: lm-eval or inspect). The file must name REV's adapter over its base.",
)
@click.option("--force", is_flag=True, help="With --from: record a file that names another model.")
@click.option("--reason", help="Why --force records it (kept in the evaluation).")
@click.option(
    "--base-dir",
    type=click.Path(exists=True, file_okay=False),
    help="The base model folder a harness evaluator runs over (default: where `mint base add` "
    "found it).",
)
@json_option
@with_repo
def eval_cmd(
    repo, rev, contract_name, metrics, harness_file, force, reason, base_dir, as_json
) -> None:
    """Run the contract's evaluator on REV (or record --metric values, or a harness's results
    with --from) and keep the result."""
    ev = _evaluation(repo, rev, contract_name, metrics, harness_file, force, reason, base_dir)
    ev = api.evaluation_checks(repo, ev)
    if as_json:
        return emit_json(ev)
    echo(
        f"evaluation {ev.id} of {short(ev.commit_id)} under {ev.contract} v{ev.version} "
        f"({ev.source})"
    )
    echo(checks_table(ev.checks))


def _evaluation(repo, rev, contract_name, metrics, harness_file, force, reason, base_dir):
    from mint.ids import EvalSource

    by = current_user()
    if metrics and harness_file:
        raise click.UsageError("give --metric values or --from a harness's file, not both")
    if (force or reason) and not harness_file:
        raise click.UsageError("--force and --reason go with --from")
    if force and not (reason or "").strip():
        raise click.UsageError("--force needs --reason TEXT, which the evaluation keeps")
    if reason and not force:
        raise click.UsageError("--reason goes with --force")
    if harness_file:
        harness, path = harness_file
        return api.record_harness(
            repo, rev, contract_name, harness, path, reason=reason if force else None, by=by
        )
    if metrics:
        values = parse_pairs(metrics, "--metric")
        return api.record_evaluation(
            repo, rev, contract_name, values, source=EvalSource.MANUAL, by=by
        )
    return api.evaluate(repo, rev, contract_name, by=by, base_dir=base_dir)


def register(cli: click.Group) -> None:
    for command in (contract, eval_cmd):
        cli.add_command(command)
