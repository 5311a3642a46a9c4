"""The `mint` command. Thin: parse, call one `mint.api` function, render.

One module per command group; each has a `register(cli)`. Heavy libraries (SQLAlchemy,
huggingface_hub, torch) load only when a command that needs them runs.
"""

from __future__ import annotations

import gc
import importlib
import sys

import click

from mint import __version__
from mint.cli._common import Context

# Each command's module: a command loads its own module and no other (they import what their
# commands use, some of it heavy: the runtime's, the registry's). `mint --help` loads them all.
# A test keeps this table equal to what the modules' `register` functions add.
COMMANDS = {
    **dict.fromkeys(("init", "base", "fsck", "gc", "db"), "repo_cmds"),
    **dict.fromkeys(("commit", "log", "show", "diff", "checkout", "ls"), "commit_cmds"),
    "search": "search_cmds",
    "tag": "tag_cmds",
    "set": "set_cmds",
    "merge": "merge_cmds",
    **dict.fromkeys(("contract", "eval"), "contract_cmds"),
    **dict.fromkeys(
        ("channel", "approve", "gate", "history", "promote", "rollback", "status"),
        "channel_cmds",
    ),
    "canary": "canary_cmds",
    "fleet": "fleet_cmds",
    **dict.fromkeys(("candidates", "improve"), "loop_cmds"),
    "pull": "hub_cmds",
    **dict.fromkeys(("export", "route-eval", "serve"), "runtime_cmds"),
    **dict.fromkeys(("dataset", "traces"), "traces_cmds"),
    "registry": "registry_cmds",
    **dict.fromkeys(("clone", "fetch", "login", "logout", "push", "remote"), "remote_cmds"),
    **dict.fromkeys(("key", "signature", "verify"), "key_cmds"),
    "config": "config_cmds",
    "proposal": "proposal_cmds",
}


class LazyGroup(click.Group):
    """A group whose commands are imported when they are looked up, by `COMMANDS`.

    click finds a command with `get_command` and lists them with `list_commands`: those load
    one module, or none. Whoever reads `commands` itself sees every command, loaded."""

    def __init__(self, *args, **kwargs):
        self._loaded: dict[str, click.Command] = {}
        self._modules: set[str] = set()
        super().__init__(*args, **kwargs)

    @property
    def commands(self) -> dict[str, click.Command]:
        for module in COMMANDS.values():
            self._load(module)
        return self._loaded

    @commands.setter
    def commands(self, value: dict[str, click.Command]) -> None:
        self._loaded = dict(value)

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        self._loaded[name or cmd.name] = cmd  # no chained group here: nothing to check

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS:
            self._load(COMMANDS[cmd_name])
        return self._loaded.get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self._loaded, *COMMANDS})

    def _load(self, module: str) -> None:
        if module not in self._modules:
            self._modules.add(module)
            importlib.import_module(f"mint.cli.{module}").register(self)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
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


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; every expected error becomes one line on stderr and an exit code."""
    from mint.cli._errors import run

    code = run(cli, argv)
    # The command is done and its repository closed. What the process holds (SQLAlchemy's and
    # mint's modules: hundreds of thousands of objects) is frozen out of the full collections
    # the interpreter runs at exit, which cost `mint log` about 25 ms of its 200 (issue 24).
    # The standard streams are flushed as ever; an object that only a collection would free
    # is left to the OS, as after os._exit: the commands close what they open.
    gc.freeze()
    sys.exit(code)


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
