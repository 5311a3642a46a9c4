"""Commands of adapter commits: commit, log, show, diff, checkout, ls."""

from __future__ import annotations

import sys

import click

from mint import api
from mint.cli._common import (
    current_user,
    json_option,
    parse_pairs,
    quiet_option,
    transfer_progress,
    with_repo,
)
from mint.cli._output import echo, emit_json, safe, short, table
from mint.cli.config_cmds import sign_key_from, sign_option
from mint.cli.key_cmds import password_from, password_option


@click.command()
@click.argument("line")
@click.argument("directory", type=click.Path())
@click.option("-m", "--message", required=True, help="What this version is.")
@click.option("--meta", multiple=True, metavar="KEY=VALUE", help="Training metadata (repeatable).")
@click.option(
    "--base",
    "base_name",
    metavar="NAME",
    help="The registered base (default: from adapter_config.json).",
)
@sign_option("Sign the commit (model-signing format) with this private key.")
@password_option
@click.option(
    "--propose",
    is_flag=True,
    help="Offer it to LINE as a proposal (its writers merge it); the head does not move.",
)
@json_option
@click.pass_obj
def commit(
    ctx, line, directory, message, meta, base_name, sign_key, password_env, propose, as_json
):
    """Record the PEFT adapter folder DIRECTORY as a new commit on LINE (a model.sig in it is
    kept as the commit's signature)."""
    pairs, password = parse_pairs(meta, "--meta"), password_from(password_env)
    sign_key = sign_key_from(sign_key)  # given no path: the configured signing.key
    r = None
    if not ctx.is_remote and not propose:
        # Before the database layer loads (mint.commits.early): an unchanged folder is
        # answered from the stat cache (unless signed: --sign signs the head), and a changed
        # one starts copying into the store.
        from mint.commits import early

        texts = (message, *(f"{k}={v}" for k, v in pairs.items()))
        head = None if sign_key else early.unchanged(ctx.path, directory, line, base_name, texts)
        if head is not None and not as_json:  # mint.objects is not even imported
            return echo(f"nothing to commit: {directory} is identical to {line} ({short(head)})")
        if head is not None:
            from mint.objects import CommitResult

            r = CommitResult(head, line, [], created=False)
        else:
            early.start(ctx.path, directory)
    try:
        r = r or api.commit(
            ctx.repo(),
            line,
            directory,
            message,
            author=current_user(),
            meta=pairs,
            base=base_name,
            sign=sign_key,
            sign_password=password,
            propose="" if propose else None,
        )
    finally:
        if "mint.commits.early" in sys.modules:  # what the commit did not claim is dropped
            sys.modules["mint.commits.early"].stop()
    if as_json:
        return emit_json(r)
    echo(_committed(r, line, directory, sign_key))


def _committed(r, line: str, directory, sign_key) -> str:
    """What `mint commit` says of its result R."""
    if r.proposal is not None:
        return f"proposed {short(r.id)} to {line}: proposal {r.proposal} (refs/pr/{r.proposal})"
    if not r.created and sign_key:  # the head is signed: a new signature, no new commit
        return f"signed {line}'s head {short(r.id)} ({directory} is identical to it)"
    if not r.created:
        return f"nothing to commit: {directory} is identical to {line} ({short(r.id)})"
    return r.id


@click.command()
@click.argument("rev", required=False)
@click.option("-n", "limit", type=click.IntRange(min=1), help="Show at most N commits.")
@json_option
@with_repo
def log(repo, rev, limit, as_json) -> None:
    """Commits reachable from REV, newest first."""
    items = api.log(repo, rev, limit)
    if as_json:
        return emit_json(items)
    render_log(items)


def render_log(items) -> None:
    """Commits one a line, as `mint log` shows them (`mint search` too)."""
    for c in items:
        echo(safe(f"{c.id[:12]}  {c.line:<12} {c.created_at[:19]}  {c.author:<10} {c.message}"))


@click.command()
@click.argument("rev")
@click.option("--tensors", "all_tensors", is_flag=True, help="List every tensor.")
@click.option(
    "--tensors-offset",
    type=click.IntRange(0, 2**31 - 1),
    help="List tensors from row N (0: the first).",
)
@click.option("--tensors-limit", type=click.IntRange(1, 100_000), help="List at most N tensors.")
@json_option
@with_repo
def show(repo, rev, all_tensors, tensors_offset, tensors_limit, as_json) -> None:
    """Everything recorded for one commit. The tensor table is summarized (a count and its
    bytes); --tensors lists it, --tensors-offset/--tensors-limit one page of it. --json has
    every tensor unless paged."""
    listed = all_tensors or tensors_offset is not None or tensors_limit is not None
    wanted = "all" if listed or as_json else "summary"
    d = api.show(repo, rev, wanted, tensors_offset or 0, tensors_limit)
    if as_json:
        return emit_json(d)
    echo(f"commit {d.id}  ({d.kind} on {d.line})")
    fields = [
        ("parents", " ".join(short(p) for p in d.parents) or "-"),
        ("author", d.author),
        ("date", d.created_at),
        ("base", f"{d.base} ({short(d.base_fingerprint)})"),
        ("tags", ", ".join(d.tags) or "-"),
    ]
    if d.signatures:
        fields.append(("signed", f"{len(d.signatures)} signature(s): see mint verify {rev}"))
    if d.peft:
        p = d.peft
        fields.append(
            (
                "peft",
                f"{p['peft_type']} r={p['r']} alpha={p['lora_alpha']} "
                f"targets={p['target_modules']}",
            )
        )
    fields += list(d.meta.items()) + [(f"provenance.{k}", v) for k, v in d.provenance.items()]
    if d.dataset:
        ds = d.dataset
        fields.append(
            (
                "dataset",
                f"{ds.format} export of {ds.records} traces, {ds.size:,} bytes, by "
                f"{ds.created_by} (mint dataset show {short(ds.id)})",
            )
        )
    for label, value in fields:
        echo(f"{safe(label) + ':':<10}{safe(value)}")
    echo(f"\n    {safe(d.message)}\n")
    for m in d.members:
        echo(safe(f"  {m.role:<8} {m.label:<10} {m.commit_id[:12]}  ({m.requested})"))
    pickles = set(d.pickles)
    for path, f in d.files.items():
        mark = "  (a pickle: kept as bytes, never loaded)" if path in pickles else ""
        echo(f"  {f.sha256[:12]}  {f.size:>12,}  {safe(path)}{mark}")
    render_tensors(d, rev, listed)


def render_tensors(d, rev: str, listed: bool) -> None:
    """The tensor table's summary, and its rows (those D holds) when LISTED."""
    count = d.tensor_count or len(d.tensors)  # a registry before issue 24 sends no count
    nbytes = d.tensor_bytes or sum(t.nbytes for t in d.tensors)
    if count:
        echo(f"  {count} tensors, {nbytes:,} bytes")
    if count and not listed:
        echo(f"  (mint show {safe(rev)} --tensors lists them)")
    for t in d.tensors if listed else ():
        shape = "x".join(map(str, t.shape))
        echo(safe(f"  {t.sha256[:12]}  {t.dtype:<5} {shape:>14} {t.nbytes:>12,}  {t.name}"))


@click.command()
@click.argument("rev_a")
@click.argument("rev_b")
@json_option
@with_repo
def diff(repo, rev_a, rev_b, as_json) -> None:
    """What changed from REV_A to REV_B: config keys, tensors (with ‖B−A‖/‖A‖), members."""
    d = api.diff(repo, rev_a, rev_b)
    if as_json:
        return emit_json(d)
    echo(f"diff {short(d.a)} {short(d.b)}")
    for k, (a, b) in d.config.items():
        echo(safe(f"  config {k}: {a!r} -> {b!r}"))
    for k, (a, b) in d.members.items():
        echo(f"  member {safe(k)}: {short(a)} -> {short(b)}")
    for name in d.tensors.added:
        echo(f"  + {safe(name)}")
    for name in d.tensors.removed:
        echo(f"  - {safe(name)}")
    for c in d.tensors.changed:
        delta = "n/a" if c.rel_delta is None else f"{c.rel_delta:.4g}"
        echo(f"  ~ {safe(c.name)}  rel_delta={delta}")
    if d.empty:
        echo("  no differences")


@click.command()
@click.argument("rev")
@click.argument("directory", type=click.Path())
@json_option
@quiet_option
@with_repo
def checkout(repo, rev, directory, as_json, quiet) -> None:
    """Write REV's files, byte for byte, into DIRECTORY (new or empty)."""
    with transfer_progress("checkout", quiet, as_json) as progress:
        r = api.checkout(repo, rev, directory, progress=progress)
        progress.close()
        if as_json:
            return emit_json(r)
        echo(f"checked out {short(r.id)} into {r.path}: {r.files} files, {r.bytes:,} bytes")


@click.command("ls")
@click.option("--limit", type=click.IntRange(min=1), metavar="N", help="At most N lines.")
@click.option("--after", metavar="LINE", help="Only lines whose names sort after LINE.")
@json_option
@with_repo
def ls_cmd(repo, limit, after, as_json) -> None:
    """Lines with their heads and commit counts (a page with --limit and --after)."""
    items = api.ls(repo, limit=limit, after=after)
    if as_json:
        return emit_json(items)
    rows = [[i.name, i.kind, short(i.head), i.commits] for i in items]
    echo(table(rows, ["LINE", "KIND", "HEAD", "COMMITS"]))


def register(cli: click.Group) -> None:
    for command in (commit, log, show, diff, checkout, ls_cmd):
        cli.add_command(command)
