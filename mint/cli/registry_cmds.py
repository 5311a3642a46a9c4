"""`mint registry`: serve a repository as a registry, and manage its tokens and protected
channels. `serve` runs where the repository is (its database and store); the rest work there
or, with `--repo URL` and an admin's token, through the registry."""

from __future__ import annotations

import click

from mint import api
from mint.cli._common import current_user, json_option
from mint.cli._output import echo, emit_json, safe, table, warn

ROLES = click.Choice(["reader", "contributor", "writer", "maintainer", "admin"])
MOVE_ROLES = click.Choice(["writer", "maintainer", "admin"])


def local_repo(ctx):
    """The repository itself: `serve` never acts through a registry URL."""
    from mint.errors import LocalOnly
    from mint.repo import Repo

    repo = ctx.repo()
    if not isinstance(repo, Repo):
        raise LocalOnly("mint registry serve")
    return repo


@click.group()
def registry() -> None:
    """Serve this repository as a registry; manage its tokens and protected channels."""


@registry.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--max-body", type=click.IntRange(1), help="Largest JSON body, in bytes.")
@click.option("--max-blob", type=click.IntRange(1), help="Largest blob upload, in bytes.")
@click.option(
    "--hf-main",
    metavar="CHANNEL",
    help="The Hub protocol's `main` revision is this channel's holder (default: the head).",
)
@click.option("--public-read", is_flag=True, help="The Hub protocol's reads need no token.")
@click.option(
    "--presign-threshold",
    type=click.IntRange(0),
    default=1 << 20,
    show_default=True,
    help="On an S3 store, downloads of files of this many bytes or more are redirected to "
    "presigned S3 URLs.",
)
@click.option("--no-presign", is_flag=True, help="Never redirect downloads to S3.")
@click.option(
    "--request-timeout",
    type=click.FloatRange(0.1, 3600),
    metavar="SECONDS",
    # The defaults are Limits' (not imported here: the CLI starts without the server's code).
    help="A request's head must arrive within this; a body that stalls this long (under "
    "1 KiB in the time) is answered 408 and its connection closed.  [default: 30]",
)
@click.option(
    "--max-connections",
    type=click.IntRange(1),
    metavar="N",
    help="Connections open at once; a request on one more is answered 503.  [default: 1000]",
)
@click.option(
    "--max-instances-per-token",
    type=click.IntRange(1),
    metavar="N",
    help="Live serving instances one token reports for; a report of one more is answered "
    "429.  [default: 4096]",
)
@click.option(
    "--fleet-diverged-after",
    type=click.FloatRange(0),
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="A channel whose live instances serve another commit than its holder for this long "
    "has diverged: a fleet.diverged event, marked on its page.",
)
@click.pass_obj
def serve(
    ctx,
    host: str,
    port: int,
    max_body: int | None,
    max_blob: int | None,
    hf_main: str | None,
    public_read: bool,
    presign_threshold: int,
    no_presign: bool,
    request_timeout: float | None,
    max_connections: int | None,
    max_instances_per_token: int | None,
    fleet_diverged_after: float,
) -> None:
    """Serve the repository's HTTP API (/api/v1/, /openapi.json) and the Hugging Face Hub's
    download protocol (HF_ENDPOINT=URL: lines are repos, channels and tags revisions) until
    interrupted."""
    from dataclasses import replace

    from mint.refs import check_name
    from mint.registry.app import serve as run
    from mint.registry.blob_send import check_before
    from mint.registry.limits import Limits

    try:
        check_before()  # a setting read when a blob is sent: refused here, before the start
    except ValueError as bad:
        raise click.UsageError(str(bad)) from None

    limits = Limits()
    limits = replace(
        limits,
        body=max_body or limits.body,
        blob=max_blob or limits.blob,
        request_timeout=request_timeout or limits.request_timeout,
        connections=max_connections or limits.connections,
        instances=max_instances_per_token or limits.instances,
    )
    if hf_main is not None:
        check_name("channel", hf_main)
    presign = None if no_presign else presign_threshold
    hub = {"hf_main": hf_main, "public_read": public_read, "presign_threshold": presign}
    run(local_repo(ctx), host, port, limits, diverged_after=fleet_diverged_after, **hub)


@registry.group()
def token() -> None:
    """Bearer tokens: create (shown once), list, revoke."""


@token.command("create")
@click.argument("name")
@click.option("--role", type=ROLES, required=True, help="What the token may do.")
@click.option("--lines", "lines", multiple=True, metavar="GLOB", help="Limit it to these lines.")
@json_option
@click.pass_obj
def token_create(ctx, name: str, role: str, lines: tuple[str, ...], as_json: bool) -> None:
    """Make a token NAME; it is printed this once (only its hash is kept)."""
    made = api.token_create(ctx.repo(), name, role, list(lines), by=current_user())
    if as_json:
        return emit_json(made)
    echo(made.token)
    warn(f"token {made.name} ({made.role}): keep it now, it is not shown again")


@token.command("ls")
@json_option
@click.pass_obj
def token_ls(ctx, as_json: bool) -> None:
    """Every token (never its secret), revoked ones marked."""
    items = api.token_ls(ctx.repo())
    if as_json:
        return emit_json(items)
    rows = [
        [
            t.name,
            t.role,
            ",".join(t.lines) if t.lines else "*",
            t.created_at[:19],
            t.created_by,
            f"revoked {t.revoked_at[:19]}" if t.revoked_at else "active",
        ]
        for t in items
    ]
    echo(table(rows, ["NAME", "ROLE", "LINES", "CREATED", "BY", "STATE"]))


@token.command("revoke")
@click.argument("name")
@json_option
@click.pass_obj
def token_revoke(ctx, name: str, as_json: bool) -> None:
    """Revoke the token NAME at once (its name stays taken)."""
    info = api.token_revoke(ctx.repo(), name)
    emit_json(info) if as_json else echo(f"revoked token {safe(info.name)}")


@registry.command()
@click.argument("channel")
@click.option("--role", type=MOVE_ROLES, default="maintainer", show_default=True)
@click.option(
    "--signed",
    is_flag=True,
    help="Every move also needs a signature by a trusted key (promote/rollback --sign KEY).",
)
@click.option(
    "--keys",
    metavar="NAME[,NAME...]",
    help="With --signed: only these trusted keys sign its moves (default: any that may).",
)
@json_option
@click.pass_obj
def protect(ctx, channel: str, role: str, signed: bool, keys, as_json: bool) -> None:
    """Moving CHANNEL (on any line) needs ROLE; forcing it needs admin; approvals for it count
    only from others than the commit's author and pusher. With --signed, a move (a promote, a
    rollback, a canary's start or stop) needs a signed statement by a trusted key that may
    sign moves of it (`mint key ls`), one of --keys if given."""
    if keys is not None and not signed:
        raise click.UsageError("--keys needs --signed")
    extra = {"signed": True} if signed else {}
    if keys is not None:
        extra["keys"] = [k.strip() for k in keys.split(",")]
    p = api.protect(ctx.repo(), channel, role, by=current_user(), **extra)
    if as_json:
        return emit_json(p)
    who = f"one of {', '.join(p.keys)}" if p.keys else "a trusted key"
    also = f" and a signature by {who}" if p.signed else ""
    echo(f"{p.channel} is protected: moving it needs {p.role}{also}")


@registry.command()
@click.argument("channel")
@json_option
@click.pass_obj
def unprotect(ctx, channel: str, as_json: bool) -> None:
    """CHANNEL moves for writers again."""
    was = api.unprotect(ctx.repo(), channel)
    if as_json:
        return emit_json({"channel": channel, "was": was})
    echo(
        f"{safe(channel)} is no longer protected" if was else f"{safe(channel)} was not protected"
    )


@registry.command()
@json_option
@click.pass_obj
def protected(ctx, as_json: bool) -> None:
    """The protected channels and the role each needs."""
    items = api.protected_ls(ctx.repo())
    if as_json:
        return emit_json(items)
    rows = [[p.channel, p.role, _signed_by(p), p.created_at[:19], p.created_by] for p in items]
    echo(table(rows, ["CHANNEL", "ROLE", "SIGNED", "SINCE", "BY"]))


def _signed_by(p) -> str:
    if not p.signed:
        return "no"
    return f"by {','.join(p.keys)}" if p.keys else "yes"


def register(cli: click.Group) -> None:
    from mint.cli.webhook_cmds import webhook

    registry.add_command(webhook)
    cli.add_command(registry)
