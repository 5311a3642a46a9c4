"""Frozen base models: registered by name and by a fingerprint of their config.json."""

from __future__ import annotations

import json
from pathlib import Path

from mint.errors import InvalidConfig
from mint.objects import object_id

# Keys that transformers writes but that do not change the network: two saves of one base
# by different library versions must fingerprint the same.
VOLATILE_KEYS = ("transformers_version", "_name_or_path", "architectures_auto", "torch_dtype", "dtype")


def read_base_config(path: str | Path) -> dict:
    """Read config.json from a model folder, or the file itself."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise InvalidConfig(f"no config.json at {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidConfig(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise InvalidConfig(f"{path} does not hold a JSON object")
    return config


def fingerprint(config: dict) -> str:
    """sha256 of the canonical config, without the keys that do not change the network."""
    return object_id({k: v for k, v in config.items() if k not in VOLATILE_KEYS})


def fingerprint_path(path: str | Path) -> str:
    return fingerprint(read_base_config(path))
