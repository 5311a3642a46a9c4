"""Commands of the loop that learns from deployment: candidates, improve."""

from __future__ import annotations

import click

from mint import api
from mint.cli._common import json_option, with_repo
from mint.cli._output import echo, emit_json, short, table


@click.command("candidates")
@click.argument("ref", metavar="SET_LINE@CHANNEL")
@click.option(
    "--line",
    "lines",
    multiple=True,
    metavar="LINE",
    help="Only swap in this member line's head (repeatable; default: every member's line).",
)
@json_option
@with_repo
def candidates(repo, ref, lines, as_json) -> None:
    """Configurations one step from the channel's holder: each member line's newest commit
    swapped in, one at a time and all together."""
    items = api.candidates(repo, ref, list(lines) or None)
    if as_json:
        return emit_json(items)
    if not items:
        return echo(f"no candidates: every member of {ref} is its line's newest commit")
    rows = [
        [
            "+".join(c.lines),
            " ".join(f"{label}={short(c.members[label])}" for label in c.changed),
            short(c.existing) if c.existing else "-",
        ]
        for c in items
    ]
    echo(table(rows, ["LINES", "CHANGES", "COMMITTED"]))


def register(cli: click.Group) -> None:
    cli.add_command(candidates)
