"""`mint config`: the user's settings ($XDG_CONFIG_HOME/mint/config.json); for now the default
signing key, which `--sign` given no path uses."""

from __future__ import annotations

import os

import click

from mint.cli._common import json_option
from mint.cli._output import echo, emit_json, safe

DEFAULT_KEY = ""  # what `--sign` given no path holds


def sign_key_from(value: str | None) -> str | None:
    """The private key a `--sign` option names: its path, or, given none, `signing.key`."""
    if value != DEFAULT_KEY:
        return value
    from mint.signing.config import default_signing_key

    return default_signing_key(os.environ)


def sign_option(help_text: str):
    """`--sign [KEY.pem]`: a path, or nothing for the configured default (`signing.key`)."""
    return click.option(
        "--sign",
        "sign_key",
        metavar="[KEY.pem]",
        is_flag=False,
        flag_value=DEFAULT_KEY,
        default=None,
        help=f"{help_text} Without a path: the key `mint config set signing.key` names.",
    )


@click.group()
def config() -> None:
    """Your settings (in $XDG_CONFIG_HOME/mint/config.json): signing.key."""


@config.command("set")
@click.argument("name")
@click.argument("value")
def config_set(name, value) -> None:
    """Make setting NAME VALUE (signing.key: a private key's path; the key is not copied)."""
    from mint.signing.config import set_setting

    echo(safe(f"{name} = {set_setting(os.environ, name, value)}"))


@config.command("get")
@click.argument("name")
def config_get(name) -> None:
    """Print setting NAME (exit 1 when it is not set)."""
    from mint.signing.config import get_setting

    value = get_setting(os.environ, name)
    if value is None:
        raise click.exceptions.Exit(1)
    echo(safe(value))


@config.command("unset")
@click.argument("name")
def config_unset(name) -> None:
    """Remove setting NAME."""
    from mint.signing.config import unset_setting

    old = unset_setting(os.environ, name)
    echo(f"{name} unset" if old is not None else f"{name} was not set")


@config.command("ls")
@json_option
def config_ls(as_json) -> None:
    """Every setting made."""
    from mint.signing.config import read_settings

    settings = read_settings(os.environ)
    if as_json:
        return emit_json(settings)
    for name, value in sorted(settings.items()):
        echo(safe(f"{name} = {value}"))


def register(cli: click.Group) -> None:
    cli.add_command(config)
