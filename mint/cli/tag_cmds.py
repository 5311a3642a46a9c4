"""The tag command: create, move (--force), list and delete tags."""

from __future__ import annotations

import click

from mint import api
from mint.cli._common import current_user, json_option, with_repo
from mint.cli._output import echo, emit_json, short, table


@click.command()
@click.argument("tag_name", required=False)
@click.argument("rev", required=False)
@click.option("-m", "--message", help="A note kept with the tag.")
@click.option("--force", is_flag=True, help="Move an existing tag (logged).")
@click.option(
    "--list",
    "list_line",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[LINE]",
    help="List tags.",
)
@click.option("-d", "--delete", "delete_ref", metavar="LINE@TAG", help="Delete a tag.")
@json_option
@with_repo
def tag(repo, tag_name, rev, message, force, list_line, delete_ref, as_json) -> None:
    """Make LINE@TAG_NAME point at REV; or --list [LINE]; or -d LINE@TAG."""
    if delete_ref:
        r = api.tag_delete(repo, delete_ref, by=current_user())
        if as_json:
            return emit_json(r)
        return echo(f"deleted tag {r.line}@{r.name} (was {short(r.target)})")
    if list_line is not None or (tag_name is None and rev is None):
        items = api.tag_list(repo, list_line or tag_name or None)
        if as_json:
            return emit_json(items)
        rows = [[f"{t.line}@{t.name}", short(t.target), t.message or ""] for t in items]
        return echo(table(rows, ["TAG", "COMMIT", "MESSAGE"]))
    if not tag_name or not rev:
        raise click.UsageError("mint tag TAG REV needs both TAG and REV")
    r = api.tag(repo, tag_name, rev, by=current_user(), message=message, force=force)
    emit_json(r) if as_json else echo(f"{r.line}@{r.name} -> {r.target}")


def register(cli: click.Group) -> None:
    cli.add_command(tag)
