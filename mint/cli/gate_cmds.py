"""Commands of the registry: contracts, eval, gate, promote, approve, rollback, history, status."""

from __future__ import annotations

import click

from mint import contracts, gates
from mint.cli._common import json_option, parse_pairs, with_repo
from mint.cli._output import echo, emit_json, short, table
from mint.errors import GateRefused


@click.group()
def contract() -> None:
    """Evaluation contracts, versioned by content."""


@contract.command("add")
@click.argument("file", type=click.Path())
@json_option
@with_repo
def contract_add(repo, file, as_json) -> None:
    """Add the contract in FILE, or a new version of it."""
    r = contracts.contract_add(repo, file)
    if as_json:
        return emit_json(r)
    c = r.contract
    state = "added" if r.created else "unchanged"
    echo(f"contract {c.name} v{c.version} ({state}) guards channel {c.channel}: {short(c.id)}")


@contract.command("show")
@click.argument("name")
@click.option("--version", "version", type=int, help="A specific version (default: the latest).")
@json_option
@with_repo
def contract_show(repo, name, version, as_json) -> None:
    """One contract version."""
    c = contracts.contract_show(repo, name, version)
    if as_json:
        return emit_json(c)
    echo(f"contract {c.name} v{c.version}  ({c.id})\nchannel:   {c.channel}\nrequires:  {', '.join(c.requires) or '-'}")
    echo(f"approvals: {c.approvals}\nevaluator: {' '.join(c.evaluator['command']) if c.evaluator else '-'}")
    for m in c.metrics:
        echo("  metric " + m["name"] + " " + " ".join(f"{k}={v:g}" for k, v in m.items() if k != "name"))


@contract.command("ls")
@json_option
@with_repo
def contract_ls(repo, as_json) -> None:
    """The latest version of every contract."""
    items = contracts.contract_ls(repo)
    if as_json:
        return emit_json(items)
    echo(table([[c.name, f"v{c.version}", c.channel, len(c.metrics)] for c in items], ["NAME", "VERSION", "CHANNEL", "METRICS"]))


def _checks(rows) -> str:
    return table([[c.check, c.required, c.found, "pass" if c.ok else "FAIL"] for c in rows], ["CHECK", "REQUIRED", "FOUND", "RESULT"])


@click.command("eval")
@click.argument("rev")
@click.option("--contract", "contract_name", required=True, help="The contract to evaluate under.")
@click.option("--metric", "metrics", multiple=True, metavar="KEY=VALUE", help="Record a value computed elsewhere.")
@json_option
@with_repo
def eval_cmd(repo, rev, contract_name, metrics, as_json) -> None:
    """Run the contract's evaluator on REV (or record --metric values) and keep the result."""
    if metrics:
        ev = contracts.record(repo, rev, contract_name, parse_pairs(metrics, "--metric"), source="manual")
    else:
        ev = contracts.run_evaluator(repo, rev, contract_name)
    ev = gates.evaluation_checks(repo, ev)
    if as_json:
        return emit_json(ev)
    echo(f"evaluation {ev.id} of {short(ev.commit_id)} under {ev.contract} v{ev.version} ({ev.source})")
    echo(_checks(ev.checks))


def _report(report, as_json: bool) -> None:
    if as_json:
        return emit_json({**vars(report), "ok": report.ok})
    guarded = ", ".join(report.contracts) or "no contract (the channel moves freely)"
    echo(f"gate for {short(report.commit_id)} -> {report.line}@{report.channel} (holder {short(report.holder)}): {guarded}")
    if report.checks:
        echo(_checks(report.checks))


@click.command()
@click.argument("rev")
@click.option("--to", "channel", required=True, help="The channel.")
@click.option("--contract", "contract_name", help="Also apply this contract.")
@json_option
@with_repo
def gate(repo, rev, channel, contract_name, as_json) -> None:
    """Dry run of promote: the gate's table; exit status 3 if it would refuse."""
    report = gates.gate(repo, rev, channel, contract_name)
    _report(report, as_json)
    if not report.ok:
        raise click.exceptions.Exit(3)


@click.command()
@click.argument("rev")
@click.option("--to", "channel", required=True, help="The channel to move.")
@click.option("--contract", "contract_name", help="Also apply this contract.")
@click.option("--force", is_flag=True, help="Override a refusing gate (needs --reason; logged).")
@click.option("--reason", help="Why (recorded in history).")
@json_option
@with_repo
def promote(repo, rev, channel, contract_name, force, reason, as_json) -> None:
    """Check the gate guarding CHANNEL, then move LINE@CHANNEL to REV."""
    try:
        move = gates.promote(repo, rev, channel, contract=contract_name, force=force, reason=reason)
    except GateRefused as exc:
        _report(exc.report, as_json)
        raise
    if as_json:
        return emit_json(_move_json(move))
    echo(f"{move.line}@{move.channel}: {short(move.from_)} -> {short(move.to)} ({move.action})")


@click.command()
@click.argument("rev")
@click.option("--channel", required=True, help="The channel the approval is for.")
@json_option
@with_repo
def approve(repo, rev, channel, as_json) -> None:
    """Approve REV for CHANNEL as the current user (MINT_USER, git user.name, or login)."""
    a = gates.approve(repo, rev, channel)
    if as_json:
        return emit_json(a)
    echo(f"{a.by} {'approved' if a.created else 'had already approved'} {short(a.commit_id)} for {a.channel}")


@click.command()
@click.argument("ref", metavar="LINE@CHANNEL")
@click.option("--to", "to", metavar="REV", help="Roll back to this commit (the gate applies if it never held the channel).")
@click.option("--reason", help="Why (recorded in history).")
@json_option
@with_repo
def rollback(repo, ref, to, reason, as_json) -> None:
    """Move LINE@CHANNEL back to its previous holder."""
    try:
        move = gates.rollback(repo, ref, to=to, reason=reason)
    except GateRefused as exc:
        _report(exc.report, as_json)
        raise
    if as_json:
        return emit_json(_move_json(move))
    echo(f"{move.line}@{move.channel}: {short(move.from_)} -> {short(move.to)} (rollback)")


def _move_json(m) -> dict:
    return {"at": m.at, "action": m.action, "from": m.from_, "to": m.to, "by": m.by, "reason": m.reason,
            "contract": m.contract, "evaluations": m.evaluations}  # fmt: skip


@click.command()
@click.argument("ref", metavar="LINE@CHANNEL")
@json_option
@with_repo
def history(repo, ref, as_json) -> None:
    """Every move of a channel, oldest first: when, what, from, to, who, why, evidence."""
    moves = gates.history(repo, ref)
    if as_json:
        return emit_json([_move_json(m) for m in moves])
    rows = [[m.at[:19], m.action, short(m.from_), short(m.to), m.by, short(m.contract),
             ",".join(map(str, m.evaluations)) or "-", m.reason or ""] for m in moves]  # fmt: skip
    echo(table(rows, ["AT", "ACTION", "FROM", "TO", "BY", "CONTRACT", "EVALS", "REASON"]))


@click.command()
@json_option
@with_repo
def status(repo, as_json) -> None:
    """Every line with its head and the holder of each channel."""
    items = gates.status(repo)
    if as_json:
        return emit_json(items)
    rows = [[l.name, l.kind, short(l.head), " ".join(f"{k}={short(v)}" for k, v in l.channels.items()) or "-"] for l in items]
    echo(table(rows, ["LINE", "KIND", "HEAD", "CHANNELS"]))


def register(cli: click.Group) -> None:
    for command in (contract, eval_cmd, gate, promote, approve, rollback, history, status):
        cli.add_command(command)
