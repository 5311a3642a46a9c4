"""One table from errors to what the user reads: a line, a hint and an exit code.

The library's errors carry data and a plain message; the words about flags and commands are
the CLI's, and live here (after huggingface_hub's `CLI_ERROR_MAPPINGS`). An error class not
in the table takes the hint and exit code of its nearest listed base. MINT_DEBUG=1 shows
tracebacks.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable

import click

EXIT_ERROR, EXIT_USAGE, EXIT_GATE, EXIT_INTERRUPTED = 1, 2, 3, 130
EXIT_NOT_CONVERGED = 4  # `--wait` ran out of time: a live instance does not serve the version

Hint = str | Callable[[Exception], str | None] | None


@functools.cache
def cli_error_mappings() -> dict[type[Exception], tuple[Hint, int]]:
    """Error class -> (hint, exit code). Built on first use: `mint --help` needs none."""
    from mint import errors as e

    codes = {e.GateRefused: EXIT_GATE, e.ForceNeedsReason: EXIT_USAGE}
    codes[e.NotConverged] = EXIT_NOT_CONVERGED
    hints = {**_store_hints(e), **_input_hints(e), **_hub_hints(e), **_registry_hints(e)}
    hints |= _signing_hints(e)
    hints |= _runtime_hints()
    hints |= {e.GateRefused: None, e.MintError: None}
    return {klass: (hint, codes.get(klass, EXIT_ERROR)) for klass, hint in hints.items()}


def _store_hints(e) -> dict:
    return {
        e.StoreError: "run `mint fsck`",
        e.StoreUnavailable: "check the AWS settings (AWS_ENDPOINT_URL, keys) and the bucket",
        e.BlobChanged: "wait until whatever writes the folder is done, then commit again",
        e.RepoNotFound: _repo_hint,
        e.SchemaOutdated: "run `mint db upgrade`",
        e.DatabaseUnavailable: lambda x: (
            "create it first (for PostgreSQL: createdb NAME)" if x.missing_database else None
        ),
        e.RefConflict: "another writer got there first; run the command again",
    }


def _input_hints(e) -> dict:
    return {
        e.AmbiguousRevision: "give more hex digits",
        e.RevisionNotFound: _revision_hint,
        e.TagExists: "pass --force to move it",
        e.ReservedName: "choose another name",
        e.ChannelTypo: lambda x: (
            f"pass --create to make the new channel {str(x.ref).partition('@')[2]}"
            if x.ref
            else "pass --create to make a new channel"
        ),
        e.ChannelGuarded: "move it with `mint promote` or `mint rollback` instead",
        e.DestinationNotEmpty: "give a new or empty folder; `mint checkout REV DIR --force` "
        "replaces a folder that holds an earlier checkout of the same line, unchanged",
        e.NotACheckout: "check out into a new or empty folder, or move that one away first",
        e.NotAnAdapter: "is this the folder PEFT's save_pretrained wrote?",
        e.PickleRefused: "convert it where you trust it: load it and call "
        "`model.save_pretrained(dir, safe_serialization=True)` to write safetensors",
        e.UnknownBase: _base_hint,
        e.BaseFolderUnknown: "pass --base-dir DIR",
        e.BaseFolderMismatch: "pass the base the set was committed against (--base-dir DIR)",
        e.ForceNeedsReason: "pass --reason TEXT with --force",
        e.OtherModel: "evaluate `mint checkout REV DIR` as peft=DIR, or record it anyway with "
        "--force --reason TEXT",
        e.CanaryOpen: "stop it first: `mint canary stop LINE@CHANNEL`",
        e.NoCanary: "start one with `mint canary start LINE@CHANNEL CANDIDATE`",
        e.TraceNotFound: "see `mint traces ls`; a trace is written a moment after its turn",
        e.DatasetNotFound: "see `mint traces export`; give the full sha256",
    }


def _hub_hints(e) -> dict:
    return {
        e.NotAHubAdapter: "mint pulls PEFT adapter repos and adapter sets (mol.toml)",
        e.PullLineConflict: "pull onto another line with --as LINE",
        e.InvalidHubUri: "write hf://[ORG/]REPO or hf://[ORG/]REPO@REVISION",
        e.HubUnreachable: "check HF_ENDPOINT and the network; with HF_HUB_OFFLINE=1 mint "
        "pulls revisions already in the HF cache",
        e.NeedsNetwork: "unset HF_HUB_OFFLINE to download it",
        e.HubRepoNotFound: "check the name; a private repo needs HF_TOKEN",
        e.HubRevisionNotFound: lambda x: _known_refs(x.known),
        e.HubGated: "accept the repo's conditions on the hub, then set HF_TOKEN to a token "
        "of that account",
    }


def _registry_hints(e) -> dict:
    return {
        e.Unauthenticated: _token_hint,
        e.Forbidden: "ask an admin for a token with that role, or for those lines",
        e.TokenExists: "choose another name; a revoked token's name stays taken",
        e.UnknownToken: "see `mint registry token ls`",
        e.UnknownWebhook: "see `mint registry webhook ls`",
        e.InvalidWebhookUrl: "give an http:// or https:// URL with a host",
        e.RegistryUnreachable: "check the URL, and that `mint registry serve` runs there",
        e.NotFastForward: "fetch, then push again (or --force, as a maintainer)",
        e.MissingObjects: "push what it refers to first (mint push sends it all in order)",
        e.NotConverged: lambda x: f"the move is made; see `mint fleet {x.ref}`",
        e.TooManyInstances: "stop reporting from instances that are gone, or ask the admin "
        "for a higher `registry serve --max-instances-per-token`",
        e.ContractConflict: _contract_conflict_hint,
        e.ProposalStale: "propose it again on the line's head (`mint commit LINE DIR --propose`)",
        e.ProposalClosed: "see `mint proposal ls LINE`; propose again to reopen the work",
        e.NothingToPropose: "change the folder first: a proposal offers a new commit",
        e.ContractAmbiguous: "name the line it is for (--line LINE), or give each team's "
        "contract its own name",
    }


def _contract_conflict_hint(x) -> str:
    """Both cases: a contract for every line meets the registry's (another team's, perhaps:
    scope yours to your lines), or the same team's contract was changed here (adopt theirs)."""
    adopt = (
        "if it is the registry's contract, `mint contract add` its version (`mint contract "
        "show NAME --repo URL`); a recorded version never changes"
    )
    if x.lines:
        return f"{adopt}, or an admin adds yours as a new version"
    return f'if it is your team\'s own, scope it with lines = ["TEAM/*"]; {adopt}'


def _signing_hints(e) -> dict:
    return {
        e.SigningUnavailable: "install the sign extra: pip install 'mint-lora[sign]'",
        e.KeyExists: "see `mint key ls`",
        e.InvalidSignature: "remove that model.sig, or sign the commit with --sign KEY",
        e.MoveNotSigned: lambda x: (
            "trust the signer's public key with `mint key add NAME PUBLIC.pem`"
            if "not trusted here" in str(x.why)
            else "sign the move: --sign KEY, a key whose public half `mint key ls` lists"
        ),
        e.MoveStatementMismatch: lambda x: (
            "another writer moved it first; run the command again"
            if "moved while this move was being signed" in str(x.why)
            else "sign this move itself: run the command again with --sign KEY"
        ),
        e.NotVerified: lambda x: (
            "trust the signer's public key with `mint key add NAME PUBLIC.pem`"
            if "not trusted here" in str(x.why)
            else None
        ),
    }


def _runtime_hints() -> dict:
    from mint.runtime import errors as rt

    return {
        rt.AmbiguousLabels: "rename one label so that the base's tokenizer can tell them apart"
    }


def _token_hint(exc) -> str:
    """What to fix when a registry refuses the token: the one from MINT_TOKEN, the one `mint
    login` kept (in which file), or the lack of one."""
    where, url = getattr(exc, "token_from", None), getattr(exc, "registry", None) or "URL"
    if where == "MINT_TOKEN":
        return (
            "the token sent came from MINT_TOKEN: set it to a valid token, or unset it to use "
            f"the one `mint login {url}` keeps"
        )
    if where:
        return f"the token sent is the one `mint login` kept in {where}: run `mint login {url}`"
    return f"set MINT_TOKEN, or run `mint login {url}`"


def _base_hint(exc) -> str:
    """Which bases are registered (to pass one with --base), and how to register another."""
    known = getattr(exc, "known", None)
    add = "`mint base add NAME PATH` (the base model's folder or its config.json)"
    if not known or not isinstance(known, list):
        return ("no base is registered here yet: " if known == [] else "register it: ") + add
    shown = ", ".join(map(str, known[:10])) + (", ..." if len(known) > 10 else "")
    return f"registered here: {shown} (pass one with --base NAME); to register another: {add}"


# HOST:PORT (or HOST:PORT/PATH): a registry's address written without its scheme
_ADDRESS = re.compile(r"^(?:[\w.-]+|\[[0-9a-fA-F:]+\]):\d{1,5}(?:/\S*)?$")


def _repo_hint(exc) -> str:
    """A registry's address given as a folder gets its URL suggested; else how to make one."""
    given = getattr(exc, "given", None)
    if isinstance(given, str) and _ADDRESS.match(given):
        return f"a registry's URL starts with http:// or https://: --repo http://{given}"
    return "run `mint init` first, or pass --repo DIR"


def _revision_hint(exc) -> str | None:
    """What a revision that is not found may have been: the nearest known names (difflib,
    `RevisionNotFound.near`), and that a commit prefix is 7 hex digits or more."""
    hints = []
    if _short_hex(exc.rev):
        hints.append("a commit prefix needs 7 or more hex digits")
    near = getattr(exc, "near", None)
    if near and isinstance(near, list):  # a list, however it crossed the wire
        hints.append("did you mean " + ", ".join(map(str, near)) + "?")
    return "; ".join(hints) or None


def _short_hex(rev: object) -> bool:
    text = str(rev)
    return 0 < len(text) < 7 and all(c in "0123456789abcdef" for c in text)


def _known_refs(known: list[str] | None) -> str:
    if not known:
        return "give a branch, a tag or a full commit sha"
    return "it has " + ", ".join(known[:10]) + (", ..." if len(known) > 10 else "")


def describe(exc: Exception) -> tuple[str, str | None, int]:
    """(message, hint, exit code) for an expected error."""
    mappings = cli_error_mappings()
    for klass in type(exc).__mro__:
        if klass in mappings:
            hint, code = mappings[klass]
            text = hint(exc) if callable(hint) else hint
            return str(exc), text, code
    return str(exc), None, EXIT_ERROR


def _line(text: str) -> str:
    return " ".join(str(text).split())


def say(message: str, hint: str | None = None) -> None:
    text = f"mint: error: {_line(message)}"
    if hint:
        text += f" (hint: {_line(hint)})"
    click.echo(text, err=True)


def run(cli: click.Group, argv: list[str] | None) -> int:
    """Run the command; every expected error becomes one line on stderr and an exit code."""
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
        say(exc.format_message(), hint)
        return exc.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("mint: interrupted", err=True)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_ERROR
    except Exception as exc:  # noqa: BLE001 - the last line of defence: no traceback
        if debug:
            raise
        if _expected(exc):
            message, hint, code = describe(exc)
            say(message, hint)
            return code
        return _unexpected(exc)


def _expected(exc: Exception) -> bool:
    from mint.errors import MintError, StoreError

    return isinstance(exc, (MintError, StoreError))


def _unexpected(exc: Exception) -> int:
    import sqlalchemy as sa

    if isinstance(exc, sa.exc.OperationalError):
        first = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        say(f"database error: {first}")
        return EXIT_ERROR
    if isinstance(exc, OSError):
        say(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
        return EXIT_ERROR
    say(f"internal error: {type(exc).__name__}: {exc}", "set MINT_DEBUG=1 to see the traceback")
    return EXIT_ERROR
