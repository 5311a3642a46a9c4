"""Remotes of a local repository (`.mint/remotes.json`) and the tokens `mint login` keeps.

Tokens live in `$XDG_CONFIG_HOME/mint/tokens.json` (default `~/.config/mint/`), one per
registry URL, in a file readable by its owner alone. A token kept for a registry on this
machine answers for every loopback name of it: `http://127.0.0.1:8000`, `http://localhost:8000`
and `http://[::1]:8000` are one registry. Nothing here reads the environment by itself: the
CLI passes it in.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from mint.errors import InvalidConfig, RefExists
from mint.ids import is_url
from mint.refs.revisions import check_name
from mint.remote.http import normalize

REMOTES = "remotes.json"
TOKENS = "tokens.json"
LOOPBACK = ("127.0.0.1", "localhost", "::1")  # one host, however a URL names it
DEFAULT_PORTS = {"http": 80, "https": 443}
ORIGIN = "origin"  # the remote `mint clone` records, and `mint logout` forgets by default


@dataclass(frozen=True)
class Remote:
    name: str
    url: str


# --- remotes -------------------------------------------------------------------------


def remote_add(mint_dir: Path, name: str, url: str) -> Remote:
    """Record remote NAME at URL; adding the same pair again is a no-op."""
    check_name("remote", name)
    if not is_url(url):
        raise InvalidConfig(f"a remote is a registry URL (http:// or https://), not {url!r}")
    remotes = _read(mint_dir / REMOTES)
    url = normalize(url)
    if remotes.get(name, url) != url:
        raise RefExists(f"remote {name} exists and points at {remotes[name]}")
    remotes[name] = url
    _write(mint_dir / REMOTES, remotes, private=False)
    return Remote(name, url)


def remote_ls(mint_dir: Path) -> list[Remote]:
    return [Remote(n, u) for n, u in sorted(_read(mint_dir / REMOTES).items())]


def remote_remove(mint_dir: Path, name: str) -> Remote:
    remotes = _read(mint_dir / REMOTES)
    if name not in remotes:
        raise InvalidConfig(_unknown(name, remotes))
    url = remotes.pop(name)
    _write(mint_dir / REMOTES, remotes, private=False)
    return Remote(name, url)


def remote_url(mint_dir: Path | None, name: str) -> str:
    """The URL of remote NAME, or NAME itself when it is a URL."""
    if is_url(name):
        return normalize(name)
    remotes = _read(mint_dir / REMOTES) if mint_dir else {}
    if name not in remotes:
        raise InvalidConfig(_unknown(name, remotes))
    return remotes[name]


def _unknown(name: str, remotes: dict) -> str:
    known = ", ".join(sorted(remotes)) or "none"
    return f"no remote named {name} (known: {known})"


# --- tokens ----------------------------------------------------------------------------


def config_dir(env: Mapping[str, str]) -> Path:
    """The user's mint config folder: $XDG_CONFIG_HOME/mint, else ~/.config/mint."""
    base = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME") or "~", ".config")
    return Path(base).expanduser() / "mint"


def cache_dir(env: Mapping[str, str]) -> Path:
    """Where blobs downloaded from registries are kept: $XDG_CACHE_HOME/mint/blobs, else
    ~/.cache/mint/blobs."""
    base = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or "~", ".cache")
    return Path(base).expanduser() / "mint" / "blobs"


def check_token(token: str) -> str:
    """TOKEN without surrounding blanks; InvalidConfig unless it is one word."""
    token = token.strip()
    if not token:
        raise InvalidConfig("the token is empty: a token is one word, as the registry gave it")
    if any(c.isspace() for c in token):
        raise InvalidConfig("a token is one word, with no spaces")
    return token


def save_token(folder: Path, url: str, token: str) -> Path:
    """Keep TOKEN for the registry at URL (in place of one kept for another loopback name of
    it), in a file only its owner may read."""
    token = check_token(token)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    tokens = {u: t for u, t in _read(folder / TOKENS).items() if site(u) != site(url)}
    tokens[normalize(url)] = token
    _write(folder / TOKENS, tokens, private=True)
    return folder / TOKENS


def token_for(url: str, env: Mapping[str, str]) -> str | None:
    """MINT_TOKEN, else the token `mint login` kept for URL (or for a registry URL that
    URL lies under, under any loopback name), else None."""
    return token_source(url, env)[0]


def token_source(url: str, env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(the token `token_for` gives, where it came from: "MINT_TOKEN", the path of the file
    `mint login` keeps tokens in, or None with no token). A MINT_TOKEN that is set but empty
    counts as unset (the caller may say so: `empty_token_variable`)."""
    if (env.get("MINT_TOKEN") or "").strip():
        return env["MINT_TOKEN"].strip(), "MINT_TOKEN"
    path = config_dir(env) / TOKENS
    tokens = {site(u): t for u, t in _read(path).items()}
    url = site(url)
    under = [u for u in tokens if url == u or url.startswith(u + "/")]
    return (tokens[max(under, key=len)], str(path)) if under else (None, None)


def empty_token_variable(env: Mapping[str, str]) -> bool:
    """Whether MINT_TOKEN is set, but to nothing (blanks): `token_for` then looks past it."""
    return "MINT_TOKEN" in env and not env["MINT_TOKEN"].strip()


def site(url: str) -> str:
    """URL as kept tokens are matched: scheme and host in lower case, every loopback name as
    127.0.0.1, the port always written, no trailing slash."""
    url = normalize(url)
    try:
        parts = urlsplit(url)
        port = parts.port or DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:  # a port that is no number: match the text as it is
        return url
    host = (parts.hostname or "").lower()
    host = "127.0.0.1" if host in LOOPBACK else f"[{host}]" if ":" in host else host
    netloc = f"{host}:{port}" if port else host
    return urlunsplit((parts.scheme.lower(), netloc, parts.path.rstrip("/"), parts.query, ""))


@dataclass(frozen=True)
class Logout:
    url: str  # the registry whose token was forgotten, as `mint login` kept it
    file: str  # the token file it was removed from


def logout(folder: Path, url: str | None = None, *, origin: str | None = None) -> Logout:
    """Forget the token kept in FOLDER for the registry at URL (under any loopback name of
    it). Without URL: the one kept for ORIGIN (a repository's remote "origin"), else the only
    one kept. InvalidConfig when there is none to forget, or no way to choose one."""
    path = folder / TOKENS
    tokens = _read(path)
    kept = ", ".join(sorted(tokens)) or "none"
    if url is None:
        if origin is not None and any(site(u) == site(origin) for u in tokens):
            url = origin
        elif len(tokens) == 1:
            url = next(iter(tokens))
        elif not tokens:
            raise InvalidConfig("no registry's token is kept")
        else:
            raise InvalidConfig(
                f"tokens are kept for {len(tokens)} registries ({kept}): give the URL of one"
            )
    gone = [u for u in tokens if site(u) == site(url)]
    if not gone:
        raise InvalidConfig(f"no token is kept for {normalize(url)} (kept: {kept})")
    _write(path, {u: t for u, t in tokens.items() if u not in gone}, private=True)
    return Logout(gone[0], str(path))


# --- files -----------------------------------------------------------------------------


def _read(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise InvalidConfig(f"{path} cannot be read as JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidConfig(f"{path} does not hold a JSON object")
    return {str(k): str(v) for k, v in data.items()}


def _write(path: Path, data: dict, *, private: bool) -> None:
    """Replace PATH atomically; a private file is created 0600 and never wider."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        if private:
            os.fchmod(f.fileno(), 0o600)
        f.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@dataclass(frozen=True)
class Login:
    url: str
    name: str  # the identity the registry knows the token by
    role: str
    file: str  # where the token is kept, readable by its owner alone


def login(url: str, token: str, *, folder: Path) -> Login:
    """Check TOKEN against the registry at URL, then keep it in FOLDER's token file."""
    from mint.remote.repo import RemoteRepo

    token = check_token(token)  # an empty or spaced token never reaches the registry
    registry = RemoteRepo(url, token)
    try:
        who = registry.whoami()  # a wrong token is refused before it is kept
    finally:
        registry.close()
    path = save_token(folder, url, token)
    return Login(registry.url, who["name"], who["role"], str(path))
