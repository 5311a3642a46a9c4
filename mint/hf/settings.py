"""Where the hub is and how to reach it, and the names a pull reads: `hf://` addresses and tags.

`HubSettings.from_env` reads the HF_* variables when it is called, never at import, so that
tests pass settings explicitly. huggingface_hub reads its own copies at import time; mint
passes every setting to it explicitly instead.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from mint.errors import InvalidHubUri
from mint.refs import check_name

SCHEME = "hf://"
DEFAULT_ENDPOINT = "https://huggingface.co"
_TRUE = {"1", "ON", "YES", "TRUE"}
# ORG/REPO, or REPO alone as the Hub allows ("gpt2") and a registry names a line ("chat")
_REPO_ID = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*$")
# what git allows in a ref name, less what could walk out of the cache's refs/ folder
_REVISION = re.compile(r"^[^\x00-\x20\x7f~^:?*\[\\]+$")
HIDDEN = "***"


@dataclass(frozen=True)
class HubSettings:
    """Where and how to reach the hub. `from_env` reads the HF_* variables when called.

    `endpoint` may carry credentials (`http://user:secret@host`); messages and results show
    `shown_endpoint`, which hides them.
    """

    endpoint: str = field(default=DEFAULT_ENDPOINT, repr=False)
    token: str | None = field(default=None, repr=False)
    cache_dir: str = ""
    offline: bool = False
    progress: bool = False  # show huggingface_hub's progress bars (the CLI: on a TTY only)

    @classmethod
    def from_env(cls, env: dict | None = None, *, progress: bool = False) -> HubSettings:
        """The settings huggingface_hub would use, read from ENV (default: os.environ) now."""
        env = os.environ if env is None else env
        home = os.path.expanduser(env.get("HF_HOME") or _default_home(env))
        cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
        offline = env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE") or ""
        token_path = env.get("HF_TOKEN_PATH") or os.path.join(home, "token")
        return cls(
            endpoint=(env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/"),
            token=env.get("HF_TOKEN") or _token_file(token_path),
            cache_dir=os.path.expanduser(cache or os.path.join(home, "hub")),
            offline=offline.upper() in _TRUE,
            progress=progress,
        )

    @property
    def shown_endpoint(self) -> str:
        """The endpoint without the credentials it may carry: safe to print."""
        return hide_credentials(self.endpoint)

    def scrub(self, text: str) -> str:
        """TEXT (say, a library's error message) with the endpoint's credentials hidden."""
        userinfo, at, _ = _netloc(self.endpoint).rpartition("@")
        if not at:
            return text
        text = text.replace(self.endpoint, self.shown_endpoint)
        text = text.replace(userinfo + "@", HIDDEN + "@")
        password = userinfo.partition(":")[2]
        return text.replace(password, HIDDEN) if len(password) >= 4 else text


def _netloc(url: str) -> str:
    try:
        return urllib.parse.urlsplit(url).netloc
    except ValueError:
        return ""


def _default_home(env) -> str:
    cache = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "huggingface")


def _token_file(path: str) -> str | None:
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


def hide_credentials(url: str) -> str:
    """URL with any user and password replaced by ***."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return HIDDEN
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{HIDDEN}@{host}"))


@dataclass(frozen=True)
class HubUri:
    repo_id: str
    revision: str | None = None  # None: the default branch

    def __str__(self) -> str:
        return f"{SCHEME}{self.repo_id}" + (f"@{self.revision}" if self.revision else "")


def parse_uri(uri: str) -> HubUri:
    """hf://[ORG/]REPO[@REV] (the scheme is required: a bare path could be a folder)."""
    if not uri.startswith(SCHEME):
        raise InvalidHubUri(f"{uri!r} is not a hub address")
    repo_id, at, rev = uri[len(SCHEME) :].partition("@")
    if not _REPO_ID.match(repo_id) or ".." in repo_id or (at and not is_safe_revision(rev)):
        raise InvalidHubUri(f"{uri!r} is not a hub address")
    return HubUri(repo_id, rev or None)


def is_safe_revision(rev: str) -> bool:
    """REV could name a git ref, and cannot walk out of a folder as a path."""
    parts = rev.split("/")
    return bool(_REVISION.match(rev)) and all(p and p not in (".", "..") for p in parts)


def mint_tag_name(hub_tag: str) -> str:
    """A hub tag as a mint tag: characters mint refuses become '-' ("release/2" -> "release-2")."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", hub_tag)
    name = re.sub(r"\.{2,}", ".", name).lstrip("._-").rstrip(".")
    name = name[:-5] + "-lock" if name.endswith(".lock") else name
    return check_name("tag", name[:100] or hub_tag)
