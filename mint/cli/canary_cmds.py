"""Commands of canaries: canary start|stop|status."""

from __future__ import annotations

import click

from mint import api
from mint.cli._common import current_user, json_option, with_repo
from mint.cli._output import echo, emit_json, short, table
from mint.cli.channel_cmds import gate_report_table as gate_table  # the table promote shows
from mint.cli.channel_cmds import overridden, sign_option, signing_args
from mint.cli.fleet_cmds import wait_options, waited
from mint.cli.key_cmds import password_option
from mint.errors import GateRefused


@click.group()
def canary() -> None:
    """Serve a candidate set to a fraction of a channel's requests, and compare live scores."""


def _shown(c) -> str:
    where = f"{c.line}@{c.channel}"
    state = f"{c.outcome} {c.stopped_at[:19]}" if c.stopped_at else "open"
    return (
        f"canary #{c.id} on {where}: {short(c.candidate)} at {c.fraction:g} beside "
        f"{short(c.baseline)} ({state})"
    )


@canary.command("start")
@click.argument("ref", metavar="SET_LINE@CHANNEL")
@click.argument("candidate")
@click.option(
    "--fraction",
    type=float,
    default=0.1,
    show_default=True,
    help="Share of requests the candidate serves (between 0 and 1).",
)
@click.option("--contract", "contract_name", help="Also apply this contract.")
@click.option("--force", is_flag=True, help="Override a refusing gate (needs --reason; logged).")
@click.option("--reason", help="Why (recorded in history).")
@sign_option
@password_option
@wait_options
@json_option
@with_repo
def start(
    repo,
    ref,
    candidate,
    fraction,
    contract_name,
    force,
    reason,
    sign_key,
    password_env,
    wait,
    as_json,
) -> None:
    """Serve CANDIDATE to a fraction of SET_LINE@CHANNEL's requests beside its holder.

    Real traffic reaches it, so CANDIDATE must pass the gate `mint promote` would run for
    CHANNEL (the table is shown when it refuses), unless --force with a --reason; on a
    channel protected as signed, the start is signed (--sign) as a promote is. With --wait,
    until every live instance following the channel serves the split."""
    try:
        c = api.canary_start(
            repo,
            ref,
            candidate,
            fraction,
            by=current_user(),
            reason=reason,
            contract=contract_name,
            force=force,
            **signing_args(sign_key, password_env),
        )
    except GateRefused as exc:
        gate_table(exc.report, as_json)
        raise
    if not as_json:
        echo(_shown(c))
        overridden(getattr(c, "overridden", None))  # none from a registry before it
    if wait is None:
        return emit_json(c) if as_json else None
    split = {"canary": True, "fraction": c.fraction}
    done = waited(repo, f"{c.line}@{c.channel}", c.candidate, wait, as_json, **split)
    if as_json:
        emit_json({"canary": c, "fleet": done})


@canary.command("stop")
@click.argument("ref", metavar="SET_LINE@CHANNEL")
@click.option("--reason", help="Why (recorded in history).")
@sign_option
@password_option
@json_option
@with_repo
def stop(repo, ref, reason, sign_key, password_env, as_json) -> None:
    """Stop SET_LINE@CHANNEL's open canary: every request goes to the holder again (signed
    with --sign on a channel protected as signed)."""
    signing = signing_args(sign_key, password_env)
    c = api.canary_stop(repo, ref, by=current_user(), reason=reason, **signing)
    if as_json:
        return emit_json(c)
    echo(_shown(c))


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


@canary.command("status")
@click.argument("ref", metavar="SET_LINE@CHANNEL")
@click.option(
    "--contract",
    "contract_name",
    help="Weigh and judge under this contract's [live] table (default: the defaults).",
)
@json_option
@with_repo
def status(repo, ref, contract_name, as_json) -> None:
    """The open (else the latest) canary, and live feedback on each variant since it began:
    traces, scored traces, users and callers, the mean weighed so that no caller or user is
    over its share, its interval (Wilson), and what the live numbers say."""
    st = api.canary_status(repo, ref, contract=contract_name)
    if as_json:
        return emit_json(st)
    echo(_shown(st.canary))
    if st.holder != st.canary.baseline:
        echo(
            f"  its baseline {short(st.canary.baseline)} no longer holds {ref} "
            f"({short(st.holder)} does): its numbers compare with a set that no longer serves"
        )
    rows = [
        [
            v.variant,
            short(v.commit),
            str(v.traces),
            str(v.scored),
            f"{v.users}/{v.callers}",
            _num(v.mean),
            f"[{_num(v.low)}, {_num(v.high)}]",
        ]
        for v in (st.production, st.candidate)
    ]
    echo(table(rows, ["VARIANT", "SET", "TRACES", "SCORED", "USERS/CALLERS", "MEAN", "CI"]))
    if st.verdict is not None:
        echo(f"verdict: {st.verdict.action}: {st.verdict.reason}")


def register(cli: click.Group) -> None:
    cli.add_command(canary)
