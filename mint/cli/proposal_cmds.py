"""Commands of proposals: proposal ls, show, merge, close (a proposal is made by
`mint commit ... --propose` or `mint set derive ... --propose`)."""

from __future__ import annotations

import click

from mint import api
from mint.cli._common import current_user, json_option, with_repo
from mint.cli._output import echo, emit_json, safe, short, table
from mint.cli.channel_cmds import gate_report_table

STATUSES = click.Choice(["open", "merged", "closed"])


@click.group("proposal")
def proposal() -> None:
    """Proposals: commits offered to a line, merged or closed by its writers."""


@proposal.command("ls")
@click.argument("line", required=False)
@click.option("--status", type=STATUSES, help="Only the proposals in this state.")
@json_option
@with_repo
def proposal_ls(repo, line, status, as_json) -> None:
    """Proposals of LINE (of every line without), newest first."""
    found = api.proposal_ls(repo, line, status)
    if as_json:
        return emit_json(found)
    rows = [
        [p.line, str(p.number), p.status, short(p.commit_id), p.by, p.created_at[:19], p.title]
        for p in found
    ]
    echo(safe(table(rows, ["LINE", "N", "STATUS", "COMMIT", "BY", "AT", "TITLE"])))


@proposal.command("show")
@click.argument("line")
@click.argument("number", type=click.IntRange(min=1))
@json_option
@with_repo
def proposal_show(repo, line, number, as_json) -> None:
    """Proposal NUMBER of LINE: what it changes, its evaluations, and the gate of each
    guarded channel of the line for its commit (as it would be once merged)."""
    d = api.proposal_show(repo, line, number)
    if as_json:
        return emit_json(d)
    p = d.proposal
    echo(safe(f"proposal {p.number} of {p.line} ({p.ref}): {p.title}"))
    echo(safe(f"status:   {p.status}" + (f" (by {p.closed_by})" if p.closed_by else "")))
    echo(safe(f"commit:   {p.commit_id}\nby:       {p.by}, {p.created_at[:19]}"))
    echo(f"on:       {short(p.base)} (the line's head is {short(d.head)})")
    if p.description:
        echo(safe(f"\n    {p.description}\n"))
    if d.diff is not None:
        for path, (old, new) in d.diff.files.items():
            echo(safe(f"  {path}: {short(old)} -> {short(new)}"))
        t = d.diff.tensors
        echo(
            f"  tensors: {len(t.changed)} changed, {len(t.added)} added, {len(t.removed)} removed"
        )
    for ev in d.evaluations:
        values = ", ".join(f"{k}={v}" for k, v in ev.metrics.items())
        echo(safe(f"  evaluation under {ev.contract} v{ev.version} ({ev.source}): {values}"))
    for report in d.gates:
        gate_report_table(report, False)


@proposal.command("merge")
@click.argument("line")
@click.argument("number", type=click.IntRange(min=1))
@json_option
@with_repo
def proposal_merge(repo, line, number, as_json) -> None:
    """Move LINE's head to proposal NUMBER's commit (a writer of the line's)."""
    p = api.proposal_merge(repo, line, number, by=current_user())
    if as_json:
        return emit_json(p)
    echo(f"merged proposal {p.number} of {p.line}: its head is {short(p.commit_id)}")


@proposal.command("close")
@click.argument("line")
@click.argument("number", type=click.IntRange(min=1))
@json_option
@with_repo
def proposal_close(repo, line, number, as_json) -> None:
    """Close proposal NUMBER of LINE without merging it."""
    p = api.proposal_close(repo, line, number, by=current_user())
    if as_json:
        return emit_json(p)
    echo(f"closed proposal {p.number} of {p.line}")


def register(cli: click.Group) -> None:
    cli.add_command(proposal)
