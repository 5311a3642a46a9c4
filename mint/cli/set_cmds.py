"""Commands for MoL sets: `mint set commit`. Every other command takes set revisions too."""

from __future__ import annotations

import click

from mint import api
from mint.cli._common import current_user, json_option, parse_pairs, with_repo
from mint.cli._output import echo, emit_json, short
from mint.cli.commit_cmds import head_signed
from mint.cli.config_cmds import sign_key_from
from mint.cli.config_cmds import sign_option as _sign_option
from mint.cli.key_cmds import password_from, password_option

sign_option = _sign_option(
    "Sign the set (model-signing format) over its members' signatures with this private key."
)


@click.group("set")
def set_group() -> None:
    """Versioned MoL configurations (router, experts, labels, prompts)."""


@set_group.command("commit")
@click.argument("file", type=click.Path())
@click.option("-m", "--message", default="", help="What this version of the set is.")
@sign_option
@password_option
@json_option
@with_repo
def set_commit(repo, file, message, sign_key, password_env, as_json) -> None:
    """Pin every adapter named in mol.toml FILE to a commit and record a set commit (signed
    with --sign: every member must carry a signature that verifies)."""
    r = api.set_commit(
        repo,
        file,
        message,
        author=current_user(),
        sign=sign_key_from(sign_key),
        sign_password=password_from(password_env),
    )
    if as_json:
        return emit_json(r)
    if r.created:
        return echo(r.id)
    if sign_key is not None:
        return echo(head_signed(r, f"{file} pins the same members"))
    echo(f"nothing to commit: {file} pins the same members as {r.line} ({short(r.id)})")


@set_group.command("derive")
@click.argument("rev", metavar="SET_REV")
@click.option(
    "--use",
    "uses",
    multiple=True,
    required=True,
    metavar="LABEL=REV",
    help="Replace a member: LABEL is router, summary or an expert's label.",
)
@click.option("-m", "--message", help="What this version of the set is.")
@sign_option
@password_option
@click.option(
    "--propose",
    is_flag=True,
    help="Offer it to the set's line as a proposal (its owners merge it).",
)
@json_option
@with_repo
def set_derive(repo, rev, uses, message, sign_key, password_env, propose, as_json) -> None:
    """Commit SET_REV's set with some members replaced, on its line (no mol.toml needed)."""
    pairs = parse_pairs(uses, "--use")
    r = api.set_derive(
        repo,
        rev,
        pairs,
        message=message,
        author=current_user(),
        sign=sign_key_from(sign_key),
        sign_password=password_from(password_env),
        propose="" if propose else None,
    )
    if as_json:
        return emit_json(r)
    if r.proposal is not None:
        return echo(f"proposed {short(r.id)} to {r.line}: proposal {r.proposal}")
    if r.created:
        return echo(r.id)
    if sign_key is not None:
        return echo(head_signed(r, "the line has that set already"))
    echo(f"nothing to commit: {r.line} already has that set ({short(r.id)})")


def register(cli: click.Group) -> None:
    cli.add_command(set_group)
