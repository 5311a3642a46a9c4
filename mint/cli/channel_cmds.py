"""Commands of channels: gate, promote, approve, rollback, history, status, channel rm."""

from __future__ import annotations

import click

from mint import api
from mint.cli._common import current_user, json_option, with_repo
from mint.cli._output import echo, emit_json, short, table, warn
from mint.cli.config_cmds import sign_key_from
from mint.cli.config_cmds import sign_option as _sign_option
from mint.cli.contract_cmds import checks_table
from mint.cli.fleet_cmds import wait_options, waited
from mint.cli.key_cmds import password_from, password_option

sign_option = _sign_option(
    "Sign the move (an in-toto statement of it) with this private key; through a "
    "registry it is signed here and only the signature is sent."
)


def signing_args(sign_key, password_env) -> dict:
    """The signing options given (none: a registry that predates them is still asked); a
    `--sign` given no path signs with the configured signing.key."""
    if sign_key is None:
        return {}
    return {"sign": sign_key_from(sign_key), "password": password_from(password_env)}


def gate_report_table(report, as_json: bool) -> None:
    if as_json:
        return emit_json(report)
    guarded = ", ".join(report.contracts) or "no contract (the channel moves freely)"
    target = f"{report.line}@{report.channel} (holder {short(report.holder)})"
    echo(f"gate for {short(report.commit_id)} -> {target}: {guarded}")
    if report.checks:
        echo(checks_table(report.checks))


def _moved(move, as_json: bool, repo=None, wait: float | None = None) -> None:
    """The move; with WAIT (seconds), then the wait until the channel's fleet serves it."""
    where = f"{move.line}@{move.channel}"
    if not as_json:
        echo(f"{where}: {short(move.from_)} -> {short(move.to)} ({move.action})")
        if move.stopped_canary is not None:  # its baseline no longer holds: stopped with it
            echo(
                f"{where}: canary #{move.stopped_canary} ended in the same transaction: its "
                f"baseline no longer holds the channel (mint canary status {where})"
            )
        overridden(getattr(move, "overridden", None))  # none from a registry before it
    if wait is None:
        return emit_json(move) if as_json else None
    done = waited(repo, where, move.to, wait, as_json)
    if as_json:
        emit_json({"move": move, "fleet": done})


def overridden(checks) -> None:
    """The gate's failed checks a --force overrode, as the gate's table shows them."""
    if checks:
        n = len(checks)
        echo(f"forced past {n} failed check{'' if n == 1 else 's'} of the gate:")
        echo(checks_table(checks))


@click.command()
@click.argument("rev")
@click.option("--to", "channel", required=True, help="The channel.")
@click.option("--contract", "contract_name", help="Also apply this contract.")
@json_option
@with_repo
def gate(repo, rev, channel, contract_name, as_json) -> None:
    """Dry run of promote: the gate's table; exit status 3 if it would refuse."""
    report = api.gate(repo, rev, channel, contract_name)
    gate_report_table(report, as_json)
    if not report.ok:
        raise click.exceptions.Exit(3)


@click.command()
@click.argument("rev")
@click.option("--to", "channel", required=True, help="The channel to move.")
@click.option("--contract", "contract_name", help="Also apply this contract.")
@click.option("--force", is_flag=True, help="Override a refusing gate (needs --reason; logged).")
@click.option("--reason", help="Why (recorded in history).")
@click.option(
    "--create",
    is_flag=True,
    help="Make CHANNEL even if its name is close to a known channel's (else: did you mean?).",
)
@sign_option
@password_option
@wait_options
@json_option
@with_repo
def promote(
    repo,
    rev,
    channel,
    contract_name,
    force,
    reason,
    create,
    sign_key,
    password_env,
    wait,
    as_json,
) -> None:
    """Check the gate guarding CHANNEL, then move LINE@CHANNEL to REV."""
    from mint.errors import GateRefused

    try:
        move = api.promote(
            repo,
            rev,
            channel,
            by=current_user(),
            contract=contract_name,
            force=force,
            reason=reason,
            create=create,
            **signing_args(sign_key, password_env),
        )
    except GateRefused as exc:
        gate_report_table(exc.report, as_json)
        raise
    _only_here(repo, move, f"promote {rev} --to {channel}")
    _moved(move, as_json, repo, wait)


@click.command()
@click.argument("rev")
@click.option("--channel", required=True, help="The channel the approval is for.")
@json_option
@with_repo
def approve(repo, rev, channel, as_json) -> None:
    """Approve REV for CHANNEL as the current user (MINT_USER, git user.name, or login)."""
    a = api.approve(repo, rev, channel, by=current_user())
    if as_json:
        return emit_json(a)
    verb = "approved" if a.created else "had already approved"
    echo(f"{a.by} {verb} {short(a.commit_id)} for {a.channel}")


@click.command()
@click.argument("ref", metavar="LINE@CHANNEL")
@click.option(
    "--to",
    "to",
    metavar="REV",
    help="Roll back to this commit (the gate applies if it never held the channel).",
)
@click.option("--reason", help="Why (recorded in history).")
@sign_option
@password_option
@wait_options
@json_option
@with_repo
def rollback(repo, ref, to, reason, sign_key, password_env, wait, as_json) -> None:
    """Move LINE@CHANNEL back to its previous holder."""
    from mint.errors import GateRefused

    signing = signing_args(sign_key, password_env)
    try:
        move = api.rollback(repo, ref, by=current_user(), to=to, reason=reason, **signing)
    except GateRefused as exc:
        gate_report_table(exc.report, as_json)
        raise
    _only_here(repo, move, f"rollback {ref}" + (f" --to {to}" if to else ""))
    _moved(move, as_json, repo, wait)


def _only_here(repo, move, command: str) -> None:
    """A channel moved in a local repository whose remotes hold a channel of that name: say
    on stderr that only this repository's moved (channels never travel by push), and how to
    move the registry's. COMMAND: the move, as it would be run against the registry."""
    if getattr(repo, "is_remote", False) or move.to is None:
        return
    held = [
        r
        for r in api.remote_refs(repo, move.line)
        if r.kind == "channel" and r.name == move.channel
    ]
    urls = {r.name: r.url for r in api.remote_ls(repo.mint_dir)}
    for r in held:
        url = urls.get(r.remote, r.remote)
        warn(
            f"note: moved {move.line}@{move.channel} in this repository only; {r.remote}'s "
            f"{move.line}@{move.channel} stays where it was ({short(r.target)} at the last "
            f"fetch, {r.ref}): channels never travel by push. To move it there: "
            f"mint --repo {url} {command}"
        )


def _given(**options) -> dict:
    """The options the user gave (a registry that predates one is still asked without it)."""
    return {k: v for k, v in options.items() if v is not None}


@click.command()
@click.argument("ref", metavar="LINE@CHANNEL")
@click.option(
    "-n",
    "n",
    type=click.IntRange(min=1),
    metavar="N",
    help="Only the newest N moves (of those before --before), still oldest first.",
)
@click.option(
    "--before",
    type=click.IntRange(min=1),
    metavar="ID",
    help="Only moves older than entry ID (the ID column): the page before one.",
)
@click.option(
    "--verify",
    is_flag=True,
    help="Check each move's signature against the trusted keys: by which key, or why not.",
)
@json_option
@with_repo
def history(repo, ref, n, before, verify, as_json) -> None:
    """Moves of a channel, oldest first: entry, when, what, from, to, who, evidence, why.

    With -n N, the newest N moves; to page back, pass the first row's ID to --before."""
    if verify:
        return _history_verified(
            api.history_verify(repo, ref, **_given(n=n, before=before)), as_json
        )
    moves = api.history(repo, ref, **_given(n=n, before=before))
    if as_json:
        return emit_json(moves)
    from mint.cli._times import shown

    rows = [
        [
            str(m.id),
            shown(m.at),
            m.action,
            short(m.from_),
            short(m.to),
            m.by,
            short(m.contract),
            ",".join(map(str, m.evaluations)) or "-",
            clipped(m.reason or ""),
        ]
        for m in moves
    ]
    head = ["ID", "AT", "ACTION", "FROM", "TO", "BY", "CONTRACT", "EVALS", "REASON"]
    echo(table(rows, head))
    if any(clipped(m.reason or "") != (m.reason or "") for m in moves):
        warn(f"(reasons cut at {REASON_WIDTH} characters: `mint history {ref} --json` has them)")


REASON_WIDTH = 60  # a reason is free text (a canary's holds the gate's evidence): one cell


def clipped(text: str, width: int = REASON_WIDTH) -> str:
    """TEXT as one cell: its first line, cut to WIDTH characters with an ellipsis."""
    first = " ".join(text.split())
    return first if len(first) <= width else first[: width - 1] + "…"


def _history_verified(items, as_json: bool) -> None:
    """Each move with its signature's state: the trusted key that made it, or why not."""
    if as_json:
        return emit_json(items)
    shown = {"valid": lambda i: f"signed by {i.key} ({short(i.fingerprint)})"}
    shown["unsigned"] = lambda i: "unsigned"
    shown["invalid"] = lambda i: f"INVALID: {i.why}"
    from mint.cli._times import shown as local_time

    rows = [
        [
            str(i.move.id),
            local_time(i.move.at),
            i.move.action,
            short(i.move.from_),
            short(i.move.to),
            i.move.by,
            shown[i.state](i),
        ]
        for i in items
    ]
    echo(table(rows, ["ID", "AT", "ACTION", "FROM", "TO", "BY", "SIGNATURE"]))


STATUS_PAGE = 50  # lines on a page of `mint status` (gh lists 30 at a time)


@click.command()
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    metavar="N",
    help=f"Lines on the page (default {STATUS_PAGE}).",
)
@click.option("--after", metavar="LINE", help="Only lines whose names sort after LINE.")
@click.option("--all", "everything", is_flag=True, help="Every line, not a page of them.")
@json_option
@with_repo
def status(repo, limit, after, everything, as_json) -> None:
    """Lines by name, a page at a time (the first 50; --after LINE for the next, --all for
    every one), each with its head and a row for each channel: its holder here, and beside it
    each remote's holder of that channel as the last fetch saw it."""
    if everything and limit:
        raise click.UsageError("--all lists every line: drop --limit")
    page = None if everything else (limit or STATUS_PAGE)
    # one line more than the page, to know whether another page follows
    items = api.status(repo, **_given(limit=page + 1 if page else None, after=after))
    more = page is not None and len(items) > page
    items = items[:page] if page is not None else items
    emit_json(items) if as_json else echo(status_table(items))
    if more:
        warn(
            f"showing the first {page} lines{f' after {after}' if after else ''}: "
            f"`mint status --after {items[-1].name}` for the next {page}, "
            "`mint status --all` for every line"
        )


def status_table(items) -> str:
    """A row for each channel of each line (one for a line without channels): LINE, KIND and
    HEAD on the line's first row; CHANNEL and its HOLDER here; then a column for each remote
    on the page, its holder of that channel as last fetched ("ON ORIGIN"); where serving
    instances report, SERVING (live instances on the holder / following it, `mint fleet`). A
    column more is one entry in `columns`."""
    remotes = sorted({k.partition("/")[0] for s in items for k in s.remote})
    rows = []  # (line status, its first row?, channel or None)
    for s in items:
        channels = sorted({*s.channels, *(k.partition("/")[2] for k in s.remote)})
        rows += [(s, i == 0, ch) for i, ch in enumerate(channels or [None])]
    columns = [
        ("LINE", lambda s, first, ch: s.name if first else ""),
        ("KIND", lambda s, first, ch: str(s.kind) if first else ""),
        ("HEAD", lambda s, first, ch: short(s.head) if first else ""),
        ("CHANNEL", lambda s, first, ch: ch or "-"),
        ("HOLDER", lambda s, first, ch: short(s.channels.get(ch)) if ch else ""),
    ]
    if any(getattr(s, "serving", None) for s in items):  # instances report what they serve
        columns.append(("SERVING", lambda s, first, ch: _serving(s, ch) if ch else ""))
    columns += [
        (
            f"ON {r.upper()}",
            lambda s, first, ch, r=r: short(s.remote.get(f"{r}/{ch}")) if ch else "",
        )
        for r in remotes
    ]
    return table([[cell(*row) for _, cell in columns] for row in rows], [h for h, _ in columns])


def _serving(s, channel: str) -> str:
    """`7/8`: live instances serving CHANNEL's holder, of those following it (if any report)."""
    counts = s.serving.get(channel)
    return f"{counts[0]}/{counts[1]}" if counts else ""


@click.group()
def channel() -> None:
    """Channels themselves: remove one (moves are promote and rollback)."""


@channel.command("rm")
@click.argument("ref", metavar="LINE@CHANNEL")
@json_option
@with_repo
def channel_rm(repo, ref, as_json) -> None:
    """Remove LINE@CHANNEL (logged in its history); never a protected channel or one a
    contract names. On a registry, a maintainer's."""
    move = api.channel_rm(repo, ref, by=current_user())
    if as_json:
        return emit_json(move)
    echo(f"removed channel {move.line}@{move.channel} (was {short(move.from_)})")


def register(cli: click.Group) -> None:
    for command in (gate, promote, approve, rollback, history, status, channel):
        cli.add_command(command)
