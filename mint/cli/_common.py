"""Options shared by every command, defined once."""

from __future__ import annotations

import functools
import os

import click

from mint.repo import Repo, open_repo

json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")


class Context:
    """What the group passes down: where the repository is. Opened on first use."""

    def __init__(self, repo_path: str | None):
        self.repo_path = repo_path
        self._repo: Repo | None = None

    def repo(self) -> Repo:
        if self._repo is None:
            self._repo = open_repo(self.repo_path or os.environ.get("MINT_REPO") or None)
        return self._repo

    def close(self) -> None:
        if self._repo is not None:
            self._repo.close()


def with_repo(fn):
    """Pass the open repository as the command's first argument."""

    @click.pass_obj
    @functools.wraps(fn)
    def wrapper(ctx: Context, *args, **kwargs):
        return fn(ctx.repo(), *args, **kwargs)

    return wrapper


def parse_pairs(pairs: tuple[str, ...], what: str) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint=what)
        out[key] = value
    return out
