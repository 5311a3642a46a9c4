"""Commands of the repository: init, base, fsck, gc, db."""

from __future__ import annotations

import os

import click

from mint import api
from mint.cli._common import Context, json_option, with_repo
from mint.cli._output import echo, emit_json, safe, table

DEFAULT_GRACE_SECONDS = 3600  # mint.maintenance.DEFAULT_GRACE_SECONDS, without importing it


@click.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option(
    "--db",
    "db_url",
    metavar="URL",
    help="Metadata database URL (default: SQLite in .mint/, or MINT_DB_URL).",
)
@click.option(
    "--store",
    "store_url",
    metavar="URL",
    help="Where blobs go: s3://BUCKET/PREFIX (default: .mint/objects/). S3 credentials and "
    "endpoint come from the standard AWS settings (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...).",
)
@json_option
@click.pass_obj
def init(
    ctx: Context, directory: str, db_url: str | None, store_url: str | None, as_json: bool
) -> None:
    """Create a repository in DIRECTORY/.mint/."""
    if ctx.repo_path and ctx.is_remote:  # `--repo URL init` would make one here instead
        from mint.errors import LocalOnly

        raise LocalOnly("init")
    repo, created = api.init(
        directory, db_url or os.environ.get("MINT_DB_URL") or None, store_url or None
    )
    store = getattr(repo.store, "url", None) or str(repo.mint_dir / "objects")
    result = {"path": str(repo.mint_dir), "db": repo.db.safe_url, "store": store}
    result["created"] = created
    repo.close()
    if as_json:
        return emit_json(result)
    verb = "Initialised" if created else "Reinitialised"
    blobs = f", blobs: {store}" if store.startswith("s3://") else ""
    echo(f"{verb} mint repository in {result['path']} (metadata: {result['db']}{blobs})")


@click.group()
def base() -> None:
    """Register and list frozen base models."""


@base.command("add")
@click.argument("name")
@click.argument("path", type=click.Path(exists=True))
@json_option
@with_repo
def base_add(repo, name: str, path: str, as_json: bool) -> None:
    """Register base NAME by the config.json at PATH (a model folder or the file)."""
    b = api.base_add(repo, name, path)
    emit_json(b) if as_json else echo(f"base {b.name}: fingerprint {b.fingerprint[:16]}")


@base.command("ls")
@json_option
@with_repo
def base_ls(repo, as_json: bool) -> None:
    """List registered bases."""
    items = api.base_ls(repo)
    if as_json:
        return emit_json(items)
    rows = [[b.name, b.fingerprint[:16], b.source or ""] for b in items]
    echo(table(rows, ["NAME", "FINGERPRINT", "SOURCE"]))


@click.command()
@json_option
@with_repo
def fsck(repo, as_json) -> None:
    """Re-hash every blob and check every reference. Exits 1 if anything is wrong."""
    r = api.fsck(repo)
    if as_json:
        emit_json(r)
    else:
        for p in r.problems:
            echo(f"error: {safe(p)}")
        echo(
            f"checked {r.blobs_checked} blobs and {r.commits_checked} commits: "
            f"{len(r.problems)} problems, {len(r.dangling)} unreferenced blobs"
        )
    if not r.ok:
        raise click.exceptions.Exit(1)


@click.command()
@click.option("--dry-run", is_flag=True, help="Show the plan; delete nothing.")
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=DEFAULT_GRACE_SECONDS,
    show_default=True,
    help="Keep unreferenced blobs younger than this many seconds.",
)
@json_option
@with_repo
def gc(repo, dry_run, grace, as_json) -> None:
    """Remove blobs that no commit refers to (plan first)."""
    plan = api.gc(repo, dry_run=dry_run, grace_seconds=grace)
    if as_json:
        return emit_json(plan)
    verb = "removed" if plan.executed else "would remove"
    echo(
        f"{verb} {len(plan.blobs)} blobs ({plan.bytes:,} bytes) and {len(plan.temps)} stale temp "
        "files"
    )
    if plan.graced:
        echo(
            f"kept by the grace period ({grace:g} s): {plan.graced} unreferenced blobs "
            f"({plan.graced_bytes:,} bytes), until {plan.graced_until} at the latest"
        )


@click.group()
def db() -> None:
    """The metadata database."""


@db.command("upgrade")
@click.pass_obj
def db_upgrade(ctx: Context) -> None:
    """Run the migrations to head."""
    before, after = api.db_upgrade(ctx.path)
    echo(f"schema at {after}" + ("" if before == after else f" (was {before or 'empty'})"))


def register(cli: click.Group) -> None:
    for command in (init, base, fsck, gc, db):
        cli.add_command(command)
