"""The `mint` command. Thin: parse, call one API function, render."""

from __future__ import annotations

import sys

import click

from mint.cli._common import Context


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--repo", "repo_path", metavar="DIR", help="The repository (default: found from the current folder, or MINT_REPO).")
@click.version_option(package_name="mint", prog_name="mint")
@click.pass_context
def cli(ctx: click.Context, repo_path: str | None) -> None:
    """mint: version control, a registry and a runtime for LoRA adapters."""
    ctx.obj = Context(repo_path)
    ctx.call_on_close(ctx.obj.close)


def _register() -> None:
    from mint.cli import store_cmds

    store_cmds.register(cli)
    for name in ("gate_cmds", "set_cmds", "hub_cmds", "runtime_cmds"):
        try:
            module = __import__(f"mint.cli.{name}", fromlist=["register"])
        except ModuleNotFoundError as exc:
            if exc.name != f"mint.cli.{name}":
                raise
            continue
        module.register(cli)


_register()


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; every expected error becomes one line on stderr and an exit code."""
    from mint.cli._errors import run

    sys.exit(run(cli, argv))


if __name__ == "__main__":
    main()
