"""Commands of the hub: pull."""

from __future__ import annotations

import click

from mint import api
from mint.cli._common import (
    current_user,
    json_option,
    quiet_option,
    transfer_progress,
    transferred,
    with_repo,
)
from mint.cli._output import echo, emit_json, safe, short
from mint.cli.key_cmds import key_text


@click.command()
@click.argument("uri", metavar="hf://[ORG/]REPO[@REV]")
@click.option("--as", "line", metavar="LINE", help="The line to commit on (default: REPO's name).")
@click.option(
    "--base",
    "base_name",
    metavar="NAME",
    help="The registered base (default: from adapter_config.json).",
)
@click.option("--tag", metavar="TAG", help="Also tag the commit LINE@TAG.")
@click.option(
    "--all-tags",
    is_flag=True,
    help="Pull every hub tag, oldest first, each tagged with its hub name.",
)
@click.option(
    "--verify-signature",
    is_flag=True,
    help="Refuse a repo whose model.sig is missing or does not verify with the trusted keys.",
)
@click.option("--key", "key_name", metavar="NAME", help="With --verify-signature: only this key.")
@click.option(
    "--public-key",
    type=click.Path(dir_okay=False),
    help="With --verify-signature: this key (a file), not the trusted ones.",
)
@json_option
@quiet_option
@with_repo
def pull(repo, uri, line, base_name, tag, all_tags, verify_signature, key_name, public_key, **out):
    """Pull an adapter or an adapter set from the Hugging Face Hub (HF_ENDPOINT, HF_TOKEN,
    HF_HUB_OFFLINE and the HF cache apply). REV is a branch, a tag or a commit sha
    (default: main). A model.sig in the repo is kept as the commit's signature."""
    if all_tags and tag:
        raise click.UsageError("--all-tags tags each commit with its hub tag; drop --tag")
    if (key_name or public_key) and not verify_signature:
        raise click.UsageError("--key and --public-key go with --verify-signature")
    if key_name and public_key:
        raise click.UsageError("give --key or --public-key, not both")
    as_json, quiet = out["as_json"], out["quiet"]
    with transfer_progress("pull", quiet, as_json) as progress:
        r = api.pull(
            repo,
            uri,
            line=line,
            base=base_name,
            tag=tag,
            all_tags=all_tags,
            settings=api.HubSettings.from_env(),
            by=current_user(),
            progress=progress,
            verify_signature=verify_signature,
            key=key_name,
            public_key=key_text(public_key, "--public-key"),
        )
        progress.close()
        emit_json(r) if as_json else _rendered(r, transferred(progress, "pull"))


def _rendered(r, moved: str) -> None:
    """One summary line (what was downloaded, how fast), then a line for each revision."""
    if not r.pulled:
        return echo(f"{r.uri} has no tags: nothing to pull")
    if len(r.pulled) > 1:
        echo(f"pulled {r.created} new of {len(r.pulled)} revisions: downloaded {moved}")
    for p in r.pulled:
        _render(r.repo_id, p, moved if len(r.pulled) == 1 else None)


def _render(repo_id: str, p, moved: str | None) -> None:
    where = safe(f"hf://{repo_id}@{p.revision} ({p.sha[:12]})")
    if p.created:
        tags = f" tagged {', '.join(p.tags)}" if p.tags else ""
        stored = f"{p.bytes_written:,} bytes stored" + (f"; downloaded {moved}" if moved else "")
        echo(f"pulled {where} -> {p.kind} {p.line} {short(p.id)}{tags} ({stored})")
        if p.verified_by is not None:
            k = p.verified_by
            echo(safe(f"  signed by {k.key or 'the key given'} ({k.fingerprint[:16]}...)"))
        elif p.signed:
            echo(f"  signed: its model.sig is kept (mint verify {safe(p.line)} checks it)")
        for m in p.members:
            state = "new" if m.created else "already in the store"
            echo(f"  {safe(m.path)}: {m.line} {short(m.id)} ({state})")
    else:
        tags = f"; tagged it {', '.join(p.tags)}" if p.tags else ""
        what = f"{p.kind} {p.line} {short(p.id)}"
        downloaded = f" (downloaded {moved})" if moved else ""
        echo(f"pulled nothing: {where} is already in the store as {what}{tags}{downloaded}")


def register(cli: click.Group) -> None:
    cli.add_command(pull)
