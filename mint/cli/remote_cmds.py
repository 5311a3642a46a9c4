"""Commands of registries seen from here: remote add|ls|remove, push, fetch, clone, login,
logout."""

from __future__ import annotations

import os
import sys

import click

from mint import api
from mint.cli._common import (
    Context,
    current_user,
    json_option,
    quiet_option,
    registry,
    registry_token,
    transfer_progress,
    transferred,
)
from mint.cli._output import echo, emit_json, short
from mint.ids import is_url


def _local(ctx: Context, what: str):
    """The local repository these commands work in (a registry URL has no remotes)."""
    if ctx.is_remote:
        from mint.errors import LocalOnly

        raise LocalOnly(what)
    return ctx.repo()


def _registry(ctx: Context, name: str):
    """The RemoteRepo for REMOTE, a remote's name or a registry URL."""
    from mint.remote.config import remote_url

    url = remote_url(None if is_url(name) else _local(ctx, "a remote").mint_dir, name)
    return registry(url)


# --- remotes ----------------------------------------------------------------------------


@click.group()
def remote() -> None:
    """Registries this repository pushes to and fetches from."""


@remote.command("add")
@click.argument("name")
@click.argument("url")
@json_option
@click.pass_obj
def remote_add(ctx: Context, name: str, url: str, as_json: bool) -> None:
    """Record the registry at URL as remote NAME."""

    r = api.remote_add(_local(ctx, "remote add").mint_dir, name, url)
    emit_json(r) if as_json else echo(f"remote {r.name}: {r.url}")


@remote.command("ls")
@json_option
@click.pass_obj
def remote_ls(ctx: Context, as_json: bool) -> None:
    """The remotes, by name."""

    items = api.remote_ls(_local(ctx, "remote ls").mint_dir)
    if as_json:
        return emit_json(items)
    for r in items:
        echo(f"{r.name}\t{r.url}")


@remote.command("remove")
@click.argument("name")
@json_option
@click.pass_obj
def remote_remove(ctx: Context, name: str, as_json: bool) -> None:
    """Forget remote NAME (the registry is not touched)."""

    repo = _local(ctx, "remote remove")
    r = api.remote_remove(repo.mint_dir, name)
    api.remote_refs_forget(repo, r.name)  # as git forgets refs/remotes/NAME/
    emit_json(r) if as_json else echo(f"removed remote {r.name} ({r.url})")


# --- push, fetch, clone --------------------------------------------------------------------


@click.command()
@click.argument("remote_name", metavar="REMOTE")
@click.argument("specs", metavar="LINE[@REV]...", nargs=-1, required=True)
@click.option("--tags", is_flag=True, help="Also push the tags of the pushed commits.")
@click.option("--force", is_flag=True, help="Move a line that ours does not descend from.")
@json_option
@quiet_option
@click.pass_obj
def push(ctx: Context, remote_name, specs, tags, force, as_json, quiet) -> None:
    """Send LINE (or LINE@REV) to REMOTE: the blobs and commits it lacks, then the head."""

    repo = _local(ctx, "push")
    target = _registry(ctx, remote_name)
    with transfer_progress("push", quiet, as_json) as progress:
        try:
            r = api.push(repo, target, list(specs), tags=tags, force=force, progress=progress)
        finally:
            target.close()
        progress.close()
        emit_json(r) if as_json else _pushed(r, transferred(progress, "push"))
        _refused(r.refused)


def _pushed(r, moved: str) -> None:
    echo(f"pushed to {r.remote}: {r.commits} commit{'' if r.commits == 1 else 's'}, {moved}")
    for p in r.lines:
        moved = f"{short(p.old)} -> {short(p.new)}" if p.moved else "up to date"
        if p.member:  # it only fast-forwards: the registry may be past it, or elsewhere
            moved = moved if p.moved or p.old == p.new else f"left at {short(p.old)}"
            moved += "  (a member of a pushed set)"
        echo(f"  {p.line}: {moved}")
    for t in r.tags:
        echo(f"  tag {t}")
    for note in r.notes:
        echo(f"  note: {note}")


def _refused(messages: list[str]) -> None:
    if messages:
        from mint.errors import RegistryError

        raise RegistryError("; ".join(messages), 409)


@click.command()
@click.argument("remote_name", metavar="REMOTE")
@click.argument("lines", metavar="[LINE]...", nargs=-1)
@json_option
@quiet_option
@click.pass_obj
def fetch(ctx: Context, remote_name, lines, as_json, quiet) -> None:
    """Bring LINEs (default: all) from REMOTE with their tags and evaluations; keep REMOTE's
    channels and tags as LINE@REMOTE/NAME (read-only; pruned when the registry drops them)."""

    repo = _local(ctx, "fetch")
    source = _registry(ctx, remote_name)
    with transfer_progress("fetch", quiet, as_json) as progress:
        try:
            r = api.fetch(
                repo,
                source,
                list(lines) or None,
                by=current_user(),
                progress=progress,
                name=None if is_url(remote_name) else remote_name,
            )
        finally:
            source.close()
        progress.close()
        if not as_json:
            echo(f"fetched from {r.remote}: {transferred(progress, 'fetch')}")
        emit_json(r) if as_json else _fetched(r)
        _refused(r.conflicts)


def _fetched(r) -> None:
    """Each line fetched, the tags, and the refs pruned, under the command's summary line."""
    for f in r.lines:
        where = {
            "new": f"new at {short(f.remote)}",
            "fast-forward": f"{short(f.local)} -> {short(f.remote)}",
            "up-to-date": f"up to date ({short(f.remote)})",
            "ahead": f"ahead: here {short(f.local)}, registry {short(f.remote)}; left alone",
            "diverged": f"diverged: here {short(f.local)}, registry {short(f.remote)}; left alone",
        }[f.state]
        channels = " ".join(f"{k}={short(v)}" for k, v in f.channels.items())
        echo(f"  {f.line}: {where}" + (f"  [{channels}]" if channels else ""))
    for t in r.tags:
        echo(f"  tag {t}")
    for ref in r.pruned:
        echo(f"  pruned {ref} (gone from the registry)")


@click.command()
@click.argument("url")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--line", "lines", multiple=True, metavar="LINE", help="Only this line (repeat).")
@click.option("--db", "db_url", metavar="URL", help="Metadata database URL (default: SQLite).")
@json_option
@quiet_option
def clone(url, directory, lines, db_url, as_json, quiet) -> None:
    """A new repository in DIRECTORY from the registry at URL (its remote "origin")."""
    with transfer_progress("clone", quiet, as_json) as progress:
        r = api.clone(
            url,
            directory,
            **registry_token(url),
            lines=list(lines) or None,
            by=current_user(),
            db_url=db_url or os.environ.get("MINT_DB_URL") or None,
            progress=progress,
        )
        progress.close()
        if as_json:
            emit_json(r)
        else:
            echo(f"cloned {r.url} into {r.path}: {transferred(progress, 'clone')}")
            _fetched(r.fetched)
        _refused(r.fetched.conflicts)


@click.command()
@click.argument("url")
@json_option
def login(url, as_json) -> None:
    """Keep the token read from standard input for the registry at URL (checked first)."""
    from mint.remote.config import config_dir

    if sys.stdin.isatty():
        token = click.prompt("Token", hide_input=True, err=True)
    else:
        token = sys.stdin.read().strip()
    if not token:
        raise click.UsageError(
            "expected a token on standard input (as `mint registry token create` printed it), "
            "read nothing"
        )
    r = api.login(url, token, folder=config_dir(os.environ))
    if as_json:
        return emit_json(r)
    echo(f"logged in to {r.url} as {r.name} ({r.role}); token kept in {r.file}")


@click.command()
@click.argument("url", required=False)
@json_option
@click.pass_obj
def logout(ctx: Context, url, as_json) -> None:
    """Forget the token `mint login` kept for URL, a registry URL or a remote's name (default:
    the remote origin's, else the only one kept). MINT_TOKEN is not touched."""
    from mint.remote.config import config_dir
    from mint.remote.config import logout as forget

    r = forget(config_dir(os.environ), _login_url(ctx, url), origin=_origin(ctx))
    if as_json:
        return emit_json(r)
    echo(f"logged out of {r.url}; its token is no longer kept in {r.file}")


def _login_url(ctx: Context, name: str | None) -> str | None:
    """NAME as a registry URL: itself, or the URL of the remote of that name."""
    from mint.remote.config import remote_url

    if name is None or is_url(name):
        return name
    return remote_url(_local(ctx, "a remote").mint_dir, name)


def _origin(ctx: Context) -> str | None:
    """The registry this command is pointed at: the --repo URL, else this repository's
    remote origin (None outside a repository, or without one)."""
    from mint.errors import InvalidConfig, RepoNotFound
    from mint.remote.config import ORIGIN, remote_url
    from mint.repo import DIRNAME, find_root

    if ctx.is_remote:
        return ctx.path
    try:
        return remote_url(find_root(ctx.path) / DIRNAME, ORIGIN)
    except (RepoNotFound, InvalidConfig):
        return None


def register(cli: click.Group) -> None:
    for command in (remote, push, fetch, clone, login, logout):
        cli.add_command(command)
