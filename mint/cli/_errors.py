"""One table from errors to messages and exit codes. MINT_DEBUG=1 shows tracebacks."""

from __future__ import annotations

import os

import click

from mint.errors import MintError, StoreError


def _line(text: str) -> str:
    return " ".join(str(text).split())


def _say(message: str, hint: str | None = None) -> None:
    text = f"mint: error: {_line(message)}"
    if hint:
        text += f" (hint: {_line(hint)})"
    click.echo(text, err=True)


def run(cli: click.Group, argv: list[str] | None) -> int:
    debug = os.environ.get("MINT_DEBUG") == "1"
    try:
        # Without standalone mode, click returns an Exit's code instead of raising it.
        code = cli.main(args=argv, prog_name="mint", standalone_mode=False)
        return code if isinstance(code, int) else 0
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        hint = None
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            hint = f"see '{exc.ctx.command_path} --help'"
        _say(exc.format_message(), hint)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("mint: aborted", err=True)
        return 130
    except (MintError, StoreError) as exc:
        if debug:
            raise
        _say(str(exc), getattr(exc, "hint", None))
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("mint: interrupted", err=True)
        return 130
    except BrokenPipeError:
        return 1
    except Exception as exc:  # noqa: BLE001 - the last line of defence: no traceback
        if debug:
            raise
        return _unexpected(exc)


def _unexpected(exc: Exception) -> int:
    import sqlalchemy as sa

    if isinstance(exc, sa.exc.OperationalError):
        _say(f"database error: {str(exc.orig).strip().splitlines()[0] if exc.orig else exc}")
        return 1
    if isinstance(exc, OSError):
        _say(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
        return 1
    _say(f"internal error: {type(exc).__name__}: {exc}", "set MINT_DEBUG=1 to see the traceback")
    return 1
