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
    transferred,
    with_repo,
)
from mint.cli._output import echo, emit_json, safe, short, table, warn
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
    if r.created and "data" in pairs:
        _check_dataset(ctx.repo(), pairs["data"])
    if as_json:
        return emit_json(r)
    echo(_committed(r, line, directory, sign_key))


def _committed(r, line: str, directory, sign_key) -> str:
    """What `mint commit` says of its result R."""
    if r.proposal is not None:
        return f"proposed {short(r.id)} to {line}: proposal {r.proposal} (refs/pr/{r.proposal})"
    if not r.created and (sign_key or r.signed):  # the head signed: no new commit
        return head_signed(r, f"{directory} is identical to it")
    if not r.created:
        return f"nothing to commit: {directory} is identical to {line} ({short(r.id)})"
    return r.id


PICKLE_MARK = "  (a pickle: kept as bytes, never loaded)"


def _check_dataset(repo, data: str) -> None:
    """Warn when `--meta data=` looks like a dataset's id (its sha256, or 7 or more of its
    first hex digits) but no dataset of this repository has it: an export whose storing
    failed, or a typo, and `mint show` would link nothing."""
    text = data.strip().lower().removeprefix("sha256:")
    if not 7 <= len(text) <= 64 or any(c not in "0123456789abcdef" for c in text):
        return
    from mint.errors import AmbiguousRevision, DatasetNotFound

    try:
        api.dataset_show(repo, text)
    except DatasetNotFound:
        warn(
            f"mint: warning: data={data} names no dataset recorded in this repository "
            "(`mint traces export` records one; `mint dataset show ID` finds it)"
        )
    except AmbiguousRevision:
        pass


def head_signed(r, why: str) -> str:
    """What signing R's commit, a line's head (WHY: why no commit was made), did: "signed"
    only when the registry or the repository kept the new signature."""
    if r.signed:
        return f"signed {r.line}'s head {short(r.id)} ({why})"
    already = f"{r.line}'s head {short(r.id)} carries this key's signature already"
    return f"{already} ({why}): nothing added"


@click.command()
@click.argument("rev", required=False)
@click.option("-n", "limit", type=click.IntRange(min=1), help="Show at most N commits.")
@click.option("--oneline", is_flag=True, help="One line a commit: id, line, names, message.")
@click.option("--since", metavar="WHEN", help="Only commits made at or after WHEN.")
@click.option("--until", metavar="WHEN", help="Only commits made at or before WHEN.")
@click.option("--author", metavar="NAME", help="Only commits whose author's name holds NAME.")
@json_option
@with_repo
def log(repo, rev, limit, oneline, since, until, author, as_json) -> None:
    """Commits reachable from REV (default: every commit), newest first, each with the names
    that point at it: its line's head, tags, channels, a remote's as last fetched.

    WHEN is a date (2026-12-04), a date and time (local unless it ends in Z or +01:00) or an
    age (2 days ago, 3h). --author matches a part of the name, in any case. Times are shown in
    the local zone."""
    from mint.cli._times import when

    window = {k: when(v, f"--{k}") for k, v in (("since", since), ("until", until)) if v}
    items = api.log(repo, rev, limit, author=author, **window)
    if as_json:
        return emit_json(items)
    render_log(items, oneline=oneline)


def render_log(items, *, oneline: bool = False) -> None:
    """Commits as `mint log` shows them (`mint search` too): a block each, as git's log shows
    them (id, line and names; author; date; the message indented), or one line each."""
    from mint.cli._times import shown

    for i, c in enumerate(items):
        names = _decorations(c)
        if oneline:
            first = c.message.splitlines()[0] if c.message else ""
            echo(safe(f"{short(c.id)} {c.line}{names} {first}"))
            continue
        if i:
            echo()
        echo(safe(f"commit {short(c.id)} {c.line}{names}"))
        if len(c.parents) > 1:  # a merge: every parent, its line's head first, as git shows
            echo(f"Merge:  {' '.join(short(p) for p in c.parents)}")
        echo(safe(f"Author: {c.author}"))
        echo(f"Date:   {shown(c.created_at)}")
        echo()
        for text in c.message.splitlines() or [""]:
            echo(safe(f"    {text}"))


def _decorations(c) -> str:
    """(head, tag: v3, production, origin/production): the names pointing at commit C, each
    without its line (the commit's line is shown beside them)."""
    refs = getattr(c, "refs", None) or []  # a registry before decorations sends none
    if not refs:
        return ""
    words = []
    for d in refs:
        name = d.name.split("@", 1)[1] if "@" in d.name else d.name
        words.append({"head": "head", "tag": f"tag: {name}"}.get(d.kind, name))
    return " (" + ", ".join(words) + ")"


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
    echo(fields_text(show_fields(d, rev, listed)))
    echo(f"\n{indented(d.message)}")


def show_fields(d, rev: str, listed: bool) -> list[tuple[str, list[str]]]:
    """What `show` prints of commit D, as (label, lines): one layout for every part, a label
    in the first column and its lines in the second, the message below them."""
    from mint.cli._times import shown

    out = [
        ("commit", [f"{d.id}  ({d.kind} on {d.line})"]),
        ("parents", [" ".join(short(p) for p in d.parents) or "-"]),
        ("author", [d.author]),
        ("date", [shown(d.created_at)]),
        ("base", [f"{d.base} ({short(d.base_fingerprint)})"]),
        ("tags", [", ".join(d.tags) or "-"]),
    ]
    if d.signatures:
        out.append(("signed", [f"{len(d.signatures)} signature(s): see mint verify {rev}"]))
    if d.peft:
        p = d.peft
        targets = p["target_modules"]
        targets = ", ".join(targets) if isinstance(targets, list) else str(targets)
        out.append(("peft", [f"{p['peft_type']} r={p['r']} alpha={p['lora_alpha']}, {targets}"]))
    if d.meta:
        out.append(("meta", [f"{k}={v}" for k, v in d.meta.items()]))
    if d.provenance:
        out.append(("provenance", [f"{k}={v}" for k, v in d.provenance.items()]))
    if d.dataset:
        ds = d.dataset
        out.append(
            (
                "dataset",
                [
                    f"{ds.format} export of {ds.records} traces, {ds.size:,} bytes, by "
                    f"{ds.created_by} (mint dataset show {short(ds.id)})"
                ],
            )
        )
    if d.members:
        rows = [[m.role, m.label, short(m.commit_id), f"({m.requested})"] for m in d.members]
        out.append(("members", _columns(rows)))
    pickles = set(getattr(d, "pickles", ()))  # a registry before issue 37 sends none
    rows = [
        [short(f.sha256), f"{f.size:,}", path + (PICKLE_MARK if path in pickles else "")]
        for path, f in d.files.items()
    ]
    out.append(("files", _columns(rows, right={1})))
    out += tensor_fields(d, rev, listed)
    return out


def tensor_fields(d, rev: str, listed: bool) -> list[tuple[str, list[str]]]:
    """The tensor table's summary, and its rows (those D holds) when LISTED."""
    count = d.tensor_count or len(d.tensors)  # a registry before issue 24 sends no count
    nbytes = d.tensor_bytes or sum(t.nbytes for t in d.tensors)
    if not count:
        return []
    lines = [f"{count} tensors, {nbytes:,} bytes"]
    if not listed:
        lines[0] += f" (mint show {rev} --tensors lists them)"
        return [("tensors", lines)]
    rows = [
        [short(t.sha256), t.dtype, "x".join(map(str, t.shape)), f"{t.nbytes:,}", t.name]
        for t in d.tensors
    ]
    return [("tensors", lines + _columns(rows, right={2, 3}))]


def _columns(rows: list[list[str]], right: set[int] = frozenset()) -> list[str]:
    """ROWS as aligned text lines (the columns in RIGHT aligned right)."""
    if not rows:
        return ["-"]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            str(c).rjust(w) if i in right else str(c).ljust(w)
            for i, (c, w) in enumerate(zip(r, widths))
        ).rstrip()
        for r in rows
    ]


def fields_text(fields: list[tuple[str, list[str]]]) -> str:
    """FIELDS as two columns: each label once, its lines one below the other."""
    width = max(len(label) for label, _ in fields) + 2
    out = []
    for label, lines in fields:
        for i, line in enumerate(lines or ["-"]):
            out.append(safe(f"{(label if i == 0 else ''):<{width}}{line}"))
    return "\n".join(out)


def indented(message: str) -> str:
    return "\n".join(safe(f"    {line}") for line in message.splitlines() or [""])


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
        echo(f"  ~ {safe(c.name)}  {_tensor_change(c)}")
    if d.empty:
        echo("  no differences")


def _tensor_change(c) -> str:
    """rel_delta=0.1234, or the shape that changed (no delta between two shapes)."""
    a, b = getattr(c, "shape_a", None), getattr(c, "shape_b", None)
    if a is not None and b is not None and a != b:
        return f"shape {'x'.join(map(str, a))} -> {'x'.join(map(str, b))}"
    if c.rel_delta is None:
        return "rel_delta=n/a (not a float tensor, or zero before)"
    return f"rel_delta={c.rel_delta:.4g}"


@click.command()
@click.argument("rev")
@click.argument("directory", type=click.Path())
@click.option(
    "--force",
    is_flag=True,
    help="Replace DIRECTORY if it holds an earlier checkout of REV's line, unchanged (only then).",
)
@json_option
@quiet_option
@with_repo
def checkout(repo, rev, directory, force, as_json, quiet) -> None:
    """Write REV's files, byte for byte, into DIRECTORY (new or empty; with --force, one that
    holds an earlier checkout of the same line, as mint wrote it, is replaced)."""
    with transfer_progress("checkout", quiet, as_json) as progress:
        r = api.checkout(repo, rev, directory, progress=progress, force=force)
        progress.close()
        if as_json:
            return emit_json(r)
        instead = f" (replacing the checkout of {short(r.replaced)})" if r.replaced else ""
        echo(
            f"checked out {short(r.id)} into {safe(r.path)}{instead}: "
            f"{transferred(progress, 'checkout')}"
        )


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
