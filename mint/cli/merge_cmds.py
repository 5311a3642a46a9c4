"""`mint merge`: adapters merged with PEFT's add_weighted_adapter, committed with every input
as a parent; `mint merge --replay REV` makes a merge again and compares its bytes."""

from __future__ import annotations

import click

from mint import api
from mint.cli._common import current_user, json_option, with_repo
from mint.cli._output import echo, emit_json, short
from mint.cli.runtime_cmds import base_dir_option

METHODS = ("linear", "ties", "dare_linear", "dare_ties", "svd", "cat")


def combiner():
    """The runtime's merge (torch and PEFT), handed to the core's operation."""
    from mint.cli.runtime_cmds import quiet_libraries
    from mint.runtime.merge import combine

    quiet_libraries()
    return combine


def _weights(text: str | None) -> list[float] | None:
    if text is None:
        return None
    try:
        return [float(w) for w in text.split(",")]
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: numbers separated by commas", param_hint="--weights"
        ) from None


@click.command("merge")
@click.argument("line", required=False)
@click.argument("revs", nargs=-1, metavar="REV...")
@click.option("--method", type=click.Choice(METHODS), help="How PEFT combines them.")
@click.option("--weights", metavar="W1,W2,...", help="One weight per REV (default: equal, sum 1).")
@click.option("--density", type=float, help="The share of weights kept (ties and dare).")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), help="Seeds DARE's drops (default 0).")
@click.option("--rank", "svd_rank", type=click.IntRange(min=1), help="svd: the merged rank.")
@click.option("-m", "--message", help="The commit's message.")
@click.option("--replay", metavar="REV", help="Make REV's merge again and compare the bytes.")
@base_dir_option
@json_option
@with_repo
def merge(repo, line, revs, method, weights, density, seed, svd_rank, message, replay, **rest):
    """Merge the adapters REV... (two or more, one base) with PEFT's add_weighted_adapter and
    commit the result on LINE, its parents LINE's head and every REV, the recipe in its
    provenance. With --replay REV: make REV's merge again; exit 1 if a byte differs."""
    base_dir, as_json = rest["base_dir"], rest["as_json"]
    if replay:
        if line or revs or method or message:
            raise click.UsageError("--replay REV takes no LINE, REV, --method or -m")
        return _replay(repo, replay, base_dir, as_json)
    if not line or not revs or not method or message is None:
        raise click.UsageError("give LINE, the REVs to merge, --method and -m MESSAGE")
    r = api.merge(
        repo,
        line,
        list(revs),
        method=method,
        weights=_weights(weights),
        density=density,
        seed=seed,
        svd_rank=svd_rank,
        message=message,
        author=current_user(),
        combine=combiner(),
        base_dir=base_dir,
    )
    if as_json:
        return emit_json(r)
    if not r.created:
        return echo(f"nothing to commit: the merge is {line}'s head ({short(r.id)})")
    echo(r.id)


def _replay(repo, rev: str, base_dir, as_json: bool) -> None:
    r = api.merge_replay(repo, rev, combine=combiner(), base_dir=base_dir)
    if as_json:
        emit_json(r)
    elif r.identical:
        echo(f"identical: the merge made again is {short(r.commit)}, byte for byte")
    else:
        echo(f"differs: {', '.join(r.differ)} of {short(r.commit)} came out otherwise")
        if r.recorded != r.now:
            echo(f"  made with {_versions(r.recorded)}; now {_versions(r.now)}")
    if not r.identical:
        raise click.exceptions.Exit(1)


def _versions(v: dict) -> str:
    return ", ".join(f"{k} {v.get(k)}" for k in ("peft", "torch"))


def register(cli: click.Group) -> None:
    cli.add_command(merge)
