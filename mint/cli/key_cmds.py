"""Signing: key generate, add, ls, rm, and verify (issue 23)."""

from __future__ import annotations

import os

import click

from mint import api
from mint.cli._common import current_user, json_option, with_repo
from mint.cli._output import echo, emit_json, safe, short, table


def password_from(var: str | None) -> str | None:
    """The password held by environment variable VAR (never taken as an argument, where
    `ps` and shell histories would show it)."""
    if var is None:
        return None
    value = os.environ.get(var)
    if not value:
        raise click.BadParameter(f"${var} is not set, or empty", param_hint="--password-env")
    return value


def key_text(path: str | None, option: str) -> str | None:
    """The text of the key file PATH (what it holds is the library's to check)."""
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read(16 * 1024 + 1).decode("utf-8", "replace")
    except OSError as exc:
        raise click.BadParameter(f"{path}: {exc.strerror}", param_hint=option) from None


password_option = click.option(
    "--password-env",
    metavar="VAR",
    help="The private key's password is in environment variable VAR.",
)


@click.group()
def key() -> None:
    """Signing keys: make a pair, and the public keys this repository trusts."""


@key.command("generate")
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    help="Folder for signing.key and signing.pub (default: the mint config folder's keys/).",
)
@password_option
@json_option
def key_generate(out, password_env, as_json) -> None:
    """Make an elliptic-curve (P-256) key pair; the private key is written 0600."""
    from mint.remote.config import config_dir

    folder = out or config_dir(os.environ) / "keys"
    r = api.key_generate(folder, password=password_from(password_env))
    if as_json:
        return emit_json(r)
    echo(f"public key {r.public_key}")
    echo(f"fingerprint {r.fingerprint}")
    echo(f"private key {r.private_key} (mode 0600{', encrypted' if r.encrypted else ''})")


@key.command("add")
@click.argument("name")
@click.argument("public_key", metavar="PUBLIC.pem", type=click.Path(dir_okay=False))
@json_option
@with_repo
def key_add(repo, name, public_key, as_json) -> None:
    """Trust the public key in PUBLIC.pem under NAME."""
    r = api.key_add(repo, name, key_text(public_key, "PUBLIC.pem"), by=current_user())
    emit_json(r) if as_json else echo(f"trusted {r.name} ({r.fingerprint})")


@key.command("ls")
@json_option
@with_repo
def key_ls(repo, as_json) -> None:
    """The trusted public keys."""
    items = api.key_ls(repo)
    if as_json:
        return emit_json(items)
    rows = [[k.name, k.fingerprint, k.added_by, k.added_at[:19]] for k in items]
    echo(table(rows, ["NAME", "FINGERPRINT", "ADDED BY", "ADDED"]))


@key.command("rm")
@click.argument("name")
@json_option
@with_repo
def key_rm(repo, name, as_json) -> None:
    """Stop trusting the key NAME."""
    r = api.key_rm(repo, name)
    emit_json(r) if as_json else echo(f"removed {r.name} ({r.fingerprint})")


@click.command()
@click.argument("rev", required=False)
@click.option("--dir", "folder", type=click.Path(file_okay=False), help="Verify a folder.")
@click.option("--key", "key_name", metavar="NAME", help="Only this trusted key.")
@click.option(
    "--public-key", type=click.Path(dir_okay=False), help="This key (a file), not the trusted."
)
@json_option
@with_repo
def verify(repo, rev, folder, key_name, public_key, as_json) -> None:
    """Check REV's signatures (or, with --dir, a folder's model.sig) against the trusted
    keys, and say who signed."""
    if (rev is None) == (folder is None):
        raise click.UsageError("give REV or --dir DIR")
    pem = key_text(public_key, "--public-key")
    if folder is not None:
        r = api.verify_folder(repo, folder, key=key_name, public_key=pem)
    else:
        r = api.verify(repo, rev, key=key_name, public_key=pem)
    if as_json:
        return emit_json(r)
    shown = r.target if folder is not None else short(r.target)
    kind = "set" if r.members else "commit"
    for s in r.signers:
        what = kind if s.bound else "files"
        echo(safe(f"{shown}: {what} signed by {s.key or 'the given key'} ({s.fingerprint})"))
    for m in r.members:  # a set: each member's signature that the set's names
        s = m.signer
        what = "commit" if s.bound else "files"
        who = f"{s.key or 'the given key'} ({s.fingerprint})"
        echo(safe(f"  {m.label:<10} {short(m.commit)}: {what} signed by {who}"))


def register(cli: click.Group) -> None:
    cli.add_command(key)
    cli.add_command(verify)
