"""The `mint` command. Thin: parse, call one `mint.api` function, render.

One module per command group; each has a `register(cli)`. Heavy libraries (SQLAlchemy,
huggingface_hub, torch) load only when a command that needs them runs.
"""

from __future__ import annotations

import sys

import click

from mint import __version__
from mint.cli import (
    canary_cmds,
    channel_cmds,
    commit_cmds,
    contract_cmds,
    hub_cmds,
    key_cmds,
    loop_cmds,
    registry_cmds,
    remote_cmds,
    repo_cmds,
    runtime_cmds,
    search_cmds,
    set_cmds,
    tag_cmds,
    traces_cmds,
)
from mint.cli._common import Context


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--repo",
    "repo_path",
    metavar="DIR|URL",
    help="The repository: a folder, or a registry's URL (default: found from the current "
    "folder, or MINT_REPO).",
)
@click.version_option(__version__, prog_name="mint")
@click.pass_context
def cli(ctx: click.Context, repo_path: str | None) -> None:
    """mint: version control, a registry and a runtime for LoRA adapters."""
    ctx.obj = Context(repo_path)
    ctx.call_on_close(ctx.obj.close)


for _group in (
    repo_cmds,
    commit_cmds,
    search_cmds,
    tag_cmds,
    set_cmds,
    contract_cmds,
    channel_cmds,
    canary_cmds,
    loop_cmds,
    hub_cmds,
    runtime_cmds,
    traces_cmds,
    registry_cmds,
    remote_cmds,
    key_cmds,
):
    _group.register(cli)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; every expected error becomes one line on stderr and an exit code."""
    from mint.cli._errors import run

    sys.exit(run(cli, argv))


def run_in_process(argv: list[str]) -> tuple[int, str, str]:
    """Run `mint ARGV...` in this process, as the shell would: (exit code, stdout, stderr).

    The one in-process runner, for the tests and the demo (click's CliRunner captures the
    output; `mint.cli._errors.run` turns errors into exit codes exactly as `main` does)."""
    from click.testing import CliRunner

    from mint.cli._errors import run

    runner = CliRunner()
    with runner.isolation() as (out, err, _):
        code = run(cli, list(argv))
        sys.stdout.flush()
        sys.stderr.flush()
        return code, out.getvalue().decode(), err.getvalue().decode()


if __name__ == "__main__":
    main()
