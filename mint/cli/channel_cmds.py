"""Commands of channels: gate, promote, approve, rollback, history, status, channel rm."""

from __future__ import annotations

import click

from mint import api
from mint.cli._common import current_user, json_option, with_repo
from mint.cli._output import echo, emit_json, short, table
from mint.cli.config_cmds import sign_key_from
from mint.cli.config_cmds import sign_option as _sign_option
from mint.cli.contract_cmds import checks_table
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


def _moved(move, as_json: bool) -> None:
    if as_json:
        return emit_json(move)
    where = f"{move.line}@{move.channel}"
    echo(f"{where}: {short(move.from_)} -> {short(move.to)} ({move.action})")


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
@json_option
@with_repo
def promote(
    repo, rev, channel, contract_name, force, reason, create, sign_key, password_env, as_json
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
    _moved(move, as_json)


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
@json_option
@with_repo
def rollback(repo, ref, to, reason, sign_key, password_env, as_json) -> None:
    """Move LINE@CHANNEL back to its previous holder."""
    from mint.errors import GateRefused

    signing = signing_args(sign_key, password_env)
    try:
        move = api.rollback(repo, ref, by=current_user(), to=to, reason=reason, **signing)
    except GateRefused as exc:
        gate_report_table(exc.report, as_json)
        raise
    _moved(move, as_json)


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
    rows = [
        [
            str(m.id),
            m.at[:19],
            m.action,
            short(m.from_),
            short(m.to),
            m.by,
            short(m.contract),
            ",".join(map(str, m.evaluations)) or "-",
            m.reason or "",
        ]
        for m in moves
    ]
    head = ["ID", "AT", "ACTION", "FROM", "TO", "BY", "CONTRACT", "EVALS", "REASON"]
    echo(table(rows, head))


def _history_verified(items, as_json: bool) -> None:
    """Each move with its signature's state: the trusted key that made it, or why not."""
    if as_json:
        return emit_json(items)
    shown = {"valid": lambda i: f"signed by {i.key} ({short(i.fingerprint)})"}
    shown["unsigned"] = lambda i: "unsigned"
    shown["invalid"] = lambda i: f"INVALID: {i.why}"
    rows = [
        [
            str(i.move.id),
            i.move.at[:19],
            i.move.action,
            short(i.move.from_),
            short(i.move.to),
            i.move.by,
            shown[i.state](i),
        ]
        for i in items
    ]
    echo(table(rows, ["ID", "AT", "ACTION", "FROM", "TO", "BY", "SIGNATURE"]))


@click.command()
@click.option("--limit", type=click.IntRange(min=1), metavar="N", help="At most N lines.")
@click.option("--after", metavar="LINE", help="Only lines whose names sort after LINE.")
@json_option
@with_repo
def status(repo, limit, after, as_json) -> None:
    """Every line with its head and the holder of each channel, by name (--limit and --after
    page through them); REMOTE/CHANNEL is a remote's channel as the last fetch saw it."""
    items = api.status(repo, **_given(limit=limit, after=after))
    if as_json:
        return emit_json(items)
    rows = [
        [
            s.name,
            s.kind,
            short(s.head),
            " ".join(f"{k}={short(v)}" for k, v in (s.channels | s.remote).items()) or "-",
        ]
        for s in items
    ]
    echo(table(rows, ["LINE", "KIND", "HEAD", "CHANNELS"]))


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
