"""Commands for MoL sets: `mint set commit`. Every other command takes set revisions too."""

from __future__ import annotations

import click

from mint import api
from mint.cli._common import current_user, json_option, with_repo
from mint.cli._output import echo, emit_json, short


@click.group("set")
def set_group() -> None:
    """Versioned MoL configurations (router, experts, labels, prompts)."""


@set_group.command("commit")
@click.argument("file", type=click.Path())
@click.option("-m", "--message", default="", help="What this version of the set is.")
@json_option
@with_repo
def set_commit(repo, file, message, as_json) -> None:
    """Pin every adapter named in mol.toml FILE to a commit and record a set commit."""
    r = api.set_commit(repo, file, message, author=current_user())
    if as_json:
        return emit_json(r)
    if r.created:
        return echo(r.id)
    echo(f"nothing to commit: {file} pins the same members as {r.line} ({short(r.id)})")


def register(cli: click.Group) -> None:
    cli.add_command(set_group)
