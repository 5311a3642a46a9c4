"""`mint search`: commits by meta, metrics, tags, line and author."""

from __future__ import annotations

import click

from mint import api
from mint.cli._common import json_option, with_repo
from mint.cli._output import emit_json
from mint.cli.commit_cmds import render_log


@click.command()
@click.option("--meta", multiple=True, metavar="KEY=VALUE", help="Meta KEY is VALUE (repeatable).")
@click.option(
    "--metric",
    multiple=True,
    metavar="NAME>=X",
    help="An evaluation recorded NAME >= X; also >, <=, < and = (repeatable).",
)
@click.option("--tag", multiple=True, metavar="TAG", help="A tag of this name points to it.")
@click.option("--line", metavar="GLOB", help="Its line's name matches GLOB ('*', '?', '[...]').")
@click.option("--author", metavar="NAME", help="Its author is NAME.")
@click.option("-n", "limit", type=click.IntRange(min=1), help="Show at most N commits.")
@click.option("--oneline", is_flag=True, help="One line a commit, as `mint log --oneline`.")
@json_option
@with_repo
def search(repo, meta, metric, tag, line, author, limit, oneline, as_json) -> None:
    """Commits that meet every condition, newest first (as `mint log` shows them)."""
    items = api.search(repo, meta=meta, metric=metric, tag=tag, line=line, author=author, n=limit)
    if as_json:
        return emit_json(items)
    render_log(items, oneline=oneline)


def register(cli: click.Group) -> None:
    cli.add_command(search)
