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


def limit_options(f):
    """--for, --lines, --channels: what a key may sign (none given: everything)."""
    f = click.option(
        "--channels",
        "channels",
        multiple=True,
        metavar="CHANNEL",
        help="Moves only of these channels (repeat; default: any).",
    )(f)
    f = click.option(
        "--lines",
        "lines",
        multiple=True,
        metavar="GLOB",
        help="Only commits and moves of lines matching GLOB (repeat; default: any line).",
    )(f)
    return click.option(
        "--for",
        "purposes",
        metavar="commits,sets,moves",
        help="What the key may sign (default: all three).",
    )(f)


def _limits(purposes, lines, channels) -> dict:
    return {"purposes": purposes, "lines": list(lines) or None, "channels": list(channels) or None}


@key.command("add")
@click.argument("name")
@click.argument("public_key", metavar="PUBLIC.pem", type=click.Path(dir_okay=False))
@limit_options
@json_option
@with_repo
def key_add(repo, name, public_key, purposes, lines, channels, as_json) -> None:
    """Trust the public key in PUBLIC.pem under NAME (for everything, unless limited)."""
    text = key_text(public_key, "PUBLIC.pem")
    limits = _limits(purposes, lines, channels)
    r = api.key_add(repo, name, text, by=current_user(), **limits)
    emit_json(r) if as_json else echo(f"trusted {r.name} ({r.fingerprint}) for {_for(r)}")


@key.command("limit")
@click.argument("name")
@limit_options
@json_option
@with_repo
def key_limit(repo, name, purposes, lines, channels, as_json) -> None:
    """Limit what the trusted key NAME may sign, replacing its limits (none: everything)."""
    r = api.key_limit(repo, name, **_limits(purposes, lines, channels))
    emit_json(r) if as_json else echo(f"{r.name} ({r.fingerprint}) is trusted for {_for(r)}")


def _for(k) -> str:
    """What key K may sign, in words."""
    what = ", ".join(k.purposes) if k.purposes is not None else "commits, sets, moves"
    if k.lines is not None:
        what += f" on lines {' '.join(k.lines)}"
    if k.channels is not None:
        what += f"; moves of {' '.join(k.channels)}"
    return what


@key.command("ls")
@json_option
@with_repo
def key_ls(repo, as_json) -> None:
    """The trusted public keys, and what each may sign."""
    items = api.key_ls(repo)
    if as_json:
        return emit_json(items)
    rows = [
        [
            k.name,
            k.fingerprint,
            ",".join(k.purposes) if k.purposes is not None else "commits,sets,moves",
            " ".join(k.lines) if k.lines is not None else "*",
            " ".join(k.channels) if k.channels is not None else "*",
            k.added_by,
            k.added_at[:19],
        ]
        for k in items
    ]
    head = ["NAME", "FINGERPRINT", "FOR", "LINES", "CHANNELS", "ADDED BY", "ADDED"]
    echo(table(rows, head))


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


@click.group()
def signature() -> None:
    """The signatures commits carry."""


@signature.command("prune")
@click.option("--dry-run", is_flag=True, help="Only say which would be removed.")
@json_option
@with_repo
def signature_prune(repo, dry_run, as_json) -> None:
    """Remove the kept signatures that break the rules a signature is kept by: one an older
    mint kept unchecked, or one whose key was trusted after it was kept and that does not
    verify with it (`mint fsck` reports them). An admin's on a registry."""
    r = api.signature_prune(repo, dry_run=dry_run)
    if as_json:
        return emit_json(r)
    for s in r.signatures:
        echo(safe(f"{short(s.commit)} {s.sha256[:12]}: {s.why}"))
    verb = "would remove" if dry_run else "removed"
    echo(f"{verb} {len(r.signatures)} signature(s)")


def register(cli: click.Group) -> None:
    cli.add_command(key)
    cli.add_command(verify)
    cli.add_command(signature)
