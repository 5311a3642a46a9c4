"""`mint registry webhook`: POST every ref move, signed, to URLs (docs/webhooks.md).

These run where the repository is, or with `--repo URL` and an admin's token through the
registry; `mint registry serve` delivers.
"""

from __future__ import annotations

import os

import click

from mint import api
from mint.cli._common import current_user, json_option
from mint.cli._output import echo, emit_json, safe, table, warn


@click.group()
def webhook() -> None:
    """Webhooks: every channel move, tag and push POSTed as signed JSON."""


@webhook.command("add")
@click.argument("url")
@click.option(
    "--secret-env",
    required=True,
    metavar="NAME",
    help="The environment variable of `mint registry serve` that holds the signing secret "
    "(through a registry: one named MINT_WEBHOOK_*).",
)
@click.option(
    "--events",
    metavar="TYPE,...",
    help="Only these event types (channel.moved, tag.moved, line.pushed, canary.started, "
    "canary.stopped, fleet.diverged, fleet.converged); default: all.",
)
@json_option
@click.pass_obj
def webhook_add(ctx, url: str, secret_env: str, events: str | None, as_json: bool) -> None:
    """POST the events from now on to URL, signed with the secret in $NAME."""
    kinds = [e.strip() for e in events.split(",") if e.strip()] if events else None
    hook = api.webhook_add(ctx.repo(), url, secret_env, kinds, by=current_user())
    if not ctx.is_remote and not os.environ.get(hook.secret_env):
        warn(
            f"warning: {hook.secret_env} is not set here; `mint registry serve` needs it in "
            "its environment to sign, or deliveries fail"
        )
    if as_json:
        return emit_json(hook)
    echo(f"webhook {hook.id}: {safe(hook.url)} ({_kinds(hook.events)})")


@webhook.command("ls")
@json_option
@click.pass_obj
def webhook_ls(ctx, as_json: bool) -> None:
    """Every webhook (never a secret), removed ones marked."""
    hooks = api.webhook_ls(ctx.repo())
    if as_json:
        return emit_json(hooks)
    rows = [
        [
            h.id,
            h.url,
            _kinds(h.events),
            h.secret_env,
            h.created_at[:19],
            f"removed {h.removed_at[:19]}" if h.removed_at else "active",
        ]
        for h in hooks
    ]
    echo(table(rows, ["ID", "URL", "EVENTS", "SECRET ENV", "CREATED", "STATE"]))


@webhook.command("rm")
@click.argument("hook_id", metavar="ID", type=int)
@json_option
@click.pass_obj
def webhook_rm(ctx, hook_id: int, as_json: bool) -> None:
    """Remove the webhook ID: nothing more is sent to it."""
    hook = api.webhook_rm(ctx.repo(), hook_id)
    emit_json(hook) if as_json else echo(f"removed webhook {hook.id} ({safe(hook.url)})")


@webhook.command("deliveries")
@click.argument("hook_id", metavar="[ID]", type=int, required=False)
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@json_option
@click.pass_obj
def webhook_deliveries(ctx, hook_id: int | None, limit: int, as_json: bool) -> None:
    """The newest deliveries (of the webhook ID, or of all): pending, delivered or failed."""
    items = api.webhook_deliveries(ctx.repo(), hook_id, limit)
    if as_json:
        return emit_json(items)
    rows = [
        [
            d.webhook_id,
            d.event_id,
            d.event_type,
            d.status,
            d.attempts,
            d.response_code if d.response_code is not None else "-",
            d.error or "",
        ]
        for d in items
    ]
    echo(table(rows, ["HOOK", "EVENT", "TYPE", "STATUS", "ATTEMPTS", "CODE", "ERROR"]))


def _kinds(events: list[str] | None) -> str:
    return ",".join(events) if events else "all events"
