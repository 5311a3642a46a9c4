"""The user's mint settings (`mint config`): `$XDG_CONFIG_HOME/mint/config.json` (default
`~/.config/mint/`), a file readable by its owner alone, beside the tokens `mint login` keeps.

One setting for now: `signing.key`, the private key `--sign` uses when it is given no path.
It holds the key's path, never the key: the file is checked to hold a PEM private key when
the setting is made, and loaded (with its password, if any) only when something is signed.
Nothing here reads the environment by itself: the CLI passes it in.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from mint.errors import InvalidConfig, InvalidKey

CONFIG = "config.json"
SIGNING_KEY = "signing.key"
SETTINGS = {SIGNING_KEY: "the private key --sign uses when given no path (a PEM file)"}
MAX_PEM = 16 * 1024


def config_file(env: Mapping[str, str]) -> Path:
    """$XDG_CONFIG_HOME/mint/config.json, else ~/.config/mint/config.json."""
    base = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME") or "~", ".config")
    return Path(base).expanduser() / "mint" / CONFIG


def _check_name(name: str) -> str:
    if name not in SETTINGS:
        known = ", ".join(sorted(SETTINGS))
        raise InvalidConfig(f"no setting named {name!r} (known: {known})")
    return name


def read_settings(env: Mapping[str, str]) -> dict[str, str]:
    """Every setting made (name -> value); {} when there is no config file."""
    path = config_file(env)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise InvalidConfig(f"{path} cannot be read as JSON: {str(exc)[:200]}") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise InvalidConfig(f"{path} is not an object of settings")
    return {k: v for k, v in data.items() if k in SETTINGS}


def get_setting(env: Mapping[str, str], name: str) -> str | None:
    return read_settings(env).get(_check_name(name))


def set_setting(env: Mapping[str, str], name: str, value: str) -> str:
    """Make setting NAME VALUE (checked first); returns the value kept."""
    kept = _checked(_check_name(name), value)
    _write(env, {**read_settings(env), name: kept})
    return kept


def unset_setting(env: Mapping[str, str], name: str) -> str | None:
    """Remove setting NAME; returns the value it had, if any."""
    settings = read_settings(env)
    old = settings.pop(_check_name(name), None)
    if old is not None:
        _write(env, settings)
    return old


def _checked(name: str, value: str) -> str:
    """signing.key: the absolute path of a file that holds a PEM private key (which is not
    read further, and never quoted)."""
    path = Path(value).expanduser().absolute()
    try:
        with open(path, "rb") as f:
            head = f.read(MAX_PEM)
    except OSError as exc:
        raise InvalidKey(str(path), exc.strerror or "cannot be read") from None
    if b"PRIVATE KEY-----" not in head:
        why = "this is a public key; give the private one" if b"PUBLIC KEY" in head else ""
        raise InvalidKey(str(path), why or "not a PEM private key")
    return str(path)


def _write(env: Mapping[str, str], settings: dict[str, str]) -> None:
    """The config file, written whole (a new file renamed over the old), owner-only."""
    path = config_file(env)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{CONFIG}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(settings, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def default_signing_key(env: Mapping[str, str]) -> str:
    """The private key `--sign` uses when given no path; InvalidConfig when none is set."""
    key = read_settings(env).get(SIGNING_KEY)
    if key is None:
        raise InvalidConfig(
            "--sign was given no key and no default is set: mint config set signing.key PATH"
        )
    return key
