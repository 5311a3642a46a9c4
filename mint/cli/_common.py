"""What every command shares, defined once: the repository (a folder, or a registry URL),
`--json`, `--quiet` and the progress of a transfer, who is acting."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import click

json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
quiet_option = click.option(
    "-q", "--quiet", is_flag=True, help="Show no progress on stderr (also: MINT_NO_PROGRESS=1)."
)


def transfer_progress(op: str, quiet: bool, as_json: bool):
    """How the transfer OP (a key of `mint.progress.COUNTS`) shows itself while it runs: a bar
    on stderr when stderr is a terminal; nothing with --quiet, MINT_NO_PROGRESS=1 or
    HF_HUB_DISABLE_PROGRESS_BARS=1 (as huggingface_hub reads it), nor on a pipe. Either way
    it counts, and the command's one summary line on stdout ends with what it moved
    (`transferred`), not a second line of its own.

    Use it as `with transfer_progress(...) as progress:` around the API call and the result's
    rendering, calling `progress.close()` before rendering: the bar ends above the result."""
    from mint.progress import Bar, Progress, env_flag

    if quiet or env_flag(os.environ.get("MINT_NO_PROGRESS")):
        return Progress()
    if sys.stderr.isatty() and not env_flag(os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS")):
        return Bar(op, sys.stderr)
    return Progress()


def transferred(progress, op: str) -> str:
    """What PROGRESS counted for OP: "3 blobs, 80.1 MB in 1.2 s (66.8 MB/s)"."""
    from mint.progress import moved

    return moved(progress, op)


class Context:
    """What the group passes down: where the repository is. Opened on first use."""

    def __init__(self, repo_path: str | None):
        self.repo_path = repo_path
        self._repo = None

    @property
    def path(self) -> str | None:
        return self.repo_path or os.environ.get("MINT_REPO") or None

    @property
    def is_remote(self) -> bool:
        """Whether the repository is a registry (an http:// or https:// URL)."""
        from mint.ids import is_url

        return is_url(self.path)

    def repo(self):
        """The local repository, or a `RemoteRepo` for a registry URL (token: MINT_TOKEN, or
        the one `mint login URL` kept)."""
        if self._repo is None:
            if self.is_remote:
                from mint.remote.config import cache_dir

                self._repo = registry(self.path, cache=cache_dir(os.environ))
            else:
                from mint import api

                self._repo = api.open_repo(self.path)
        return self._repo

    def close(self) -> None:
        if self._repo is not None:
            self._repo.close()


def registry_token(url: str) -> dict:
    """The token for the registry at URL (MINT_TOKEN, else the one `mint login` kept) and
    where it came from, as `token=` and `token_from=`; a MINT_TOKEN set to nothing is said on
    stderr, not passed over in silence."""
    from mint.remote.config import empty_token_variable, token_source

    token, source = token_source(url, os.environ)
    if empty_token_variable(os.environ):
        instead = f"the token `mint login` kept ({source})" if token else "no token"
        click.echo(f"mint: warning: MINT_TOKEN is set but empty; sending {instead}", err=True)
    return {"token": token, "token_from": source}


def registry(url: str, *, cache=None):
    """A `RemoteRepo` for the registry at URL, with its token (`registry_token`)."""
    from mint.remote.repo import RemoteRepo

    return RemoteRepo(url, cache=cache, **registry_token(url))


def with_repo(fn):
    """Pass the open repository as the command's first argument."""

    @click.pass_obj
    @functools.wraps(fn)
    def wrapper(ctx: Context, *args, **kwargs):
        return fn(ctx.repo(), *args, **kwargs)

    return wrapper


def parse_pairs(pairs: tuple[str, ...], what: str) -> dict[str, str]:
    """KEY=VALUE options as a dict; a pair without '=' is a usage error."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint=what)
        out[key] = value
    return out


def current_user() -> str:
    """Who is acting: MINT_USER, else git's user.name, else the login name."""
    return os.environ.get("MINT_USER") or _fallback_user()


@functools.lru_cache(maxsize=1)
def _fallback_user() -> str:
    # Asked once per process: `git config` is a subprocess, a few ms on every promote.
    try:
        out = subprocess.run(
            ["git", "config", "user.name"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
        if out:
            return out
    except (OSError, subprocess.SubprocessError):
        pass
    import getpass  # its termios import is not for every command

    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name in some containers
        return "unknown"
