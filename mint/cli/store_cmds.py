"""Commands of the store: init, base, commit, log, show, diff, tag, checkout, ls, fsck, gc, db."""

from __future__ import annotations

import os

import click

from mint import api, maintenance
from mint.cli._common import Context, json_option, parse_pairs, with_repo
from mint.cli._output import echo, emit_json, short, table
from mint.repo import init as init_repo
from mint.repo import open_repo


@click.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option("--db", "db_url", metavar="URL", help="Metadata database URL (default: SQLite in .mint/, or MINT_DB_URL).")
@json_option
def init(directory: str, db_url: str | None, as_json: bool) -> None:
    """Create a repository in DIRECTORY/.mint/."""
    repo, created = init_repo(directory, db_url or os.environ.get("MINT_DB_URL") or None)
    result = {"path": str(repo.mint_dir), "db": repo.db.safe_url, "created": created}
    repo.close()
    if as_json:
        return emit_json(result)
    verb = "Initialised" if created else "Reinitialised"
    echo(f"{verb} mint repository in {result['path']} (metadata: {result['db']})")


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
    echo(table([[b.name, b.fingerprint[:16], b.source or ""] for b in items], ["NAME", "FINGERPRINT", "SOURCE"]))


@click.command()
@click.argument("line")
@click.argument("directory", type=click.Path())
@click.option("-m", "--message", required=True, help="What this version is.")
@click.option("--meta", multiple=True, metavar="KEY=VALUE", help="Training metadata (repeatable).")
@click.option("--base", "base_name", metavar="NAME", help="The registered base (default: from adapter_config.json).")
@json_option
@with_repo
def commit(repo, line, directory, message, meta, base_name, as_json) -> None:
    """Record the PEFT adapter folder DIRECTORY as a new commit on LINE."""
    r = api.commit(repo, line, directory, message, meta=parse_pairs(meta, "--meta"), base=base_name)
    if as_json:
        return emit_json({"id": r.id, "line": r.line, "parents": r.parents, "created": r.created})
    if not r.created:
        return echo(f"nothing to commit: {directory} is identical to {line} ({short(r.id)})")
    echo(r.id)


@click.command()
@click.argument("rev", required=False)
@click.option("-n", "limit", type=click.IntRange(min=1), help="Show at most N commits.")
@json_option
@with_repo
def log(repo, rev, limit, as_json) -> None:
    """Commits reachable from REV, newest first."""
    items = api.log(repo, rev, limit)
    if as_json:
        return emit_json([{k: getattr(c, k) for k in ("id", "line", "parents", "message", "author", "created_at", "meta")} for c in items])
    for c in items:
        echo(f"{c.id[:12]}  {c.line:<12} {c.created_at[:19]}  {c.author:<10} {c.message}")


@click.command()
@click.argument("rev")
@json_option
@with_repo
def show(repo, rev, as_json) -> None:
    """Everything recorded for one commit."""
    d = api.show(repo, rev)
    if as_json:
        return emit_json(_show_json(d))
    echo(f"commit {d.id}  ({d.kind} on {d.line})")
    for label, value in [("parents", " ".join(short(p) for p in d.parents) or "-"), ("author", d.author),
                         ("date", d.created_at), ("base", f"{d.base} ({short(d.base_fingerprint)})"),
                         ("tags", ", ".join(d.tags) or "-")]:  # fmt: skip
        echo(f"{label + ':':<10}{value}")
    if d.peft:
        echo(f"{'peft:':<10}{d.peft['peft_type']} r={d.peft['r']} alpha={d.peft['lora_alpha']} targets={d.peft['target_modules']}")
    for k, v in {**d.meta, **{f"provenance.{k}": v for k, v in d.provenance.items()}}.items():
        echo(f"{k + ':':<10}{v}")
    echo(f"\n    {d.message}\n")
    for m in d.members:
        echo(f"  {m.role:<8} {m.label:<10} {m.commit_id[:12]}  ({m.requested})")
    for path, f in d.files.items():
        echo(f"  {f.sha256[:12]}  {f.size:>12,}  {path}")
    if d.tensors:
        echo(f"  {len(d.tensors)} tensors, {sum(t.nbytes for t in d.tensors):,} bytes")


def _show_json(d) -> dict:
    return {
        "id": d.id, "kind": d.kind, "line": d.line, "parents": d.parents, "message": d.message,
        "author": d.author, "created_at": d.created_at, "meta": d.meta, "base": d.base,
        "base_fingerprint": d.base_fingerprint,
        "files": {p: {"sha256": f.sha256, "size": f.size} for p, f in d.files.items()},
        "tensors": [{"name": t.name, "dtype": t.dtype, "shape": t.shape, "sha256": t.sha256} for t in d.tensors],
        "peft": d.peft, "provenance": d.provenance, "tags": d.tags,
        "members": [{"role": m.role, "label": m.label, "id": m.commit_id, "requested": m.requested} for m in d.members],
    }  # fmt: skip


@click.command()
@click.argument("rev_a")
@click.argument("rev_b")
@json_option
@with_repo
def diff(repo, rev_a, rev_b, as_json) -> None:
    """What changed from REV_A to REV_B: config keys, tensors (with ‖B−A‖/‖A‖), members."""
    d = api.diff(repo, rev_a, rev_b)
    if as_json:
        return emit_json({
            "a": d.a, "b": d.b, "config": d.config, "files": d.files, "members": d.members,
            "tensors": {"added": d.added, "removed": d.removed,
                        "changed": [{"name": c.name, "rel_delta": c.rel_delta} for c in d.changed]},
        })  # fmt: skip
    echo(f"diff {short(d.a)} {short(d.b)}")
    for k, (a, b) in d.config.items():
        echo(f"  config {k}: {a!r} -> {b!r}")
    for k, (a, b) in d.members.items():
        echo(f"  member {k}: {short(a)} -> {short(b)}")
    for name in d.added:
        echo(f"  + {name}")
    for name in d.removed:
        echo(f"  - {name}")
    for c in d.changed:
        delta = "n/a" if c.rel_delta is None else f"{c.rel_delta:.4g}"
        echo(f"  ~ {c.name}  rel_delta={delta}")
    if not (d.config or d.members or d.added or d.removed or d.changed or d.files):
        echo("  no differences")


@click.command()
@click.argument("tag_name", required=False)
@click.argument("rev", required=False)
@click.option("-m", "--message", help="A note kept with the tag.")
@click.option("--force", is_flag=True, help="Move an existing tag (logged).")
@click.option("--list", "list_line", is_flag=False, flag_value="", default=None, metavar="[LINE]", help="List tags.")
@click.option("-d", "--delete", "delete_ref", metavar="LINE@TAG", help="Delete a tag.")
@json_option
@with_repo
def tag(repo, tag_name, rev, message, force, list_line, delete_ref, as_json) -> None:
    """Make LINE@TAG_NAME point at REV; or --list [LINE]; or -d LINE@TAG."""
    if delete_ref:
        r = api.tag_delete(repo, delete_ref)
        return emit_json(r) if as_json else echo(f"deleted tag {r.line}@{r.name} (was {short(r.target)})")
    if list_line is not None or (tag_name is None and rev is None):
        items = api.tag_list(repo, list_line or tag_name or None)
        if as_json:
            return emit_json(items)
        return echo(table([[f"{t.line}@{t.name}", short(t.target), t.message or ""] for t in items], ["TAG", "COMMIT", "MESSAGE"]))
    if not tag_name or not rev:
        raise click.UsageError("mint tag TAG REV needs both TAG and REV")
    r = api.tag(repo, tag_name, rev, message=message, force=force)
    emit_json(r) if as_json else echo(f"{r.line}@{r.name} -> {r.target}")


@click.command()
@click.argument("rev")
@click.argument("directory", type=click.Path())
@json_option
@with_repo
def checkout(repo, rev, directory, as_json) -> None:
    """Write REV's files, byte for byte, into DIRECTORY (new or empty)."""
    r = api.checkout(repo, rev, directory)
    emit_json(r) if as_json else echo(f"checked out {short(r.id)} into {r.path}: {r.files} files, {r.bytes:,} bytes")


@click.command("ls")
@json_option
@with_repo
def ls_cmd(repo, as_json) -> None:
    """Lines with their heads and commit counts."""
    items = api.ls(repo)
    if as_json:
        return emit_json(items)
    echo(table([[i.name, i.kind, short(i.head), i.commits] for i in items], ["LINE", "KIND", "HEAD", "COMMITS"]))


@click.command()
@json_option
@with_repo
def fsck(repo, as_json) -> None:
    """Re-hash every blob and check every reference. Exits 1 if anything is wrong."""
    r = maintenance.fsck(repo)
    if as_json:
        emit_json({**vars(r), "ok": r.ok})
    else:
        for p in r.problems:
            echo(f"error: {p}")
        echo(f"checked {r.blobs_checked} blobs and {r.commits_checked} commits: "
             f"{len(r.problems)} problems, {len(r.dangling)} unreferenced blobs")  # fmt: skip
    if not r.ok:
        raise click.exceptions.Exit(1)


@click.command()
@click.option("--dry-run", is_flag=True, help="Show the plan; delete nothing.")
@click.option("--grace", type=float, default=maintenance.DEFAULT_GRACE_SECONDS, show_default=True,
              help="Keep unreferenced blobs younger than this many seconds.")  # fmt: skip
@json_option
@with_repo
def gc(repo, dry_run, grace, as_json) -> None:
    """Remove blobs that no commit refers to (plan first)."""
    plan = maintenance.gc(repo, dry_run=dry_run, grace_seconds=grace)
    if as_json:
        return emit_json(plan)
    verb = "removed" if plan.executed else "would remove"
    echo(f"{verb} {len(plan.blobs)} blobs ({plan.bytes:,} bytes) and {len(plan.temps)} stale temp files")


@click.group()
def db() -> None:
    """The metadata database."""


@db.command("upgrade")
@click.pass_obj
def db_upgrade(ctx: Context) -> None:
    """Run the migrations to head."""
    repo = open_repo(ctx.repo_path or os.environ.get("MINT_REPO") or None, check_schema=False)
    try:
        before, after = repo.db.upgrade()
    finally:
        repo.close()
    echo(f"schema at {after}" + ("" if before == after else f" (was {before or 'empty'})"))


def register(cli: click.Group) -> None:
    for command in (init, base, commit, log, show, diff, tag, checkout, ls_cmd, fsck, gc, db):
        cli.add_command(command)
