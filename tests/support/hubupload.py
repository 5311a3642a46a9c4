"""A registry that takes the Hugging Face Hub's uploads, for the tests of issue 37: one real
`mint registry serve` over a repository (SQLite or PostgreSQL) with the tiny base registered
and a token for each role the tests act as, and the unmodified huggingface_hub client on it.

huggingface_hub reads HF_HUB_DISABLE_XET once, when it is imported: `no_xet()` sets the
variable and the value it read, as a user's `export HF_HUB_DISABLE_XET=1` does before Python
starts (one test runs a fresh interpreter without it, to see what a user sees then).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from mint import api

from support.pgdb import pg_database
from support.registry import Registry, create_token, start_registry

# name -> (role, line globs)
TOKENS = {
    "writer": ("writer", ()),
    "team-a": ("writer", ("team-a/*",)),
    "team-b": ("writer", ("team-b/*",)),
    "contrib": ("contributor", ("team-a/*",)),
    "reader": ("reader", ()),
    "maint": ("maintainer", ()),
    "admin": ("admin", ()),
}


@contextlib.contextmanager
def no_xet():
    """HF_HUB_DISABLE_XET=1 for the huggingface_hub of this process, and its progress bars off."""
    from huggingface_hub import constants
    from huggingface_hub.utils import (
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    bars = not are_progress_bars_disabled()
    disable_progress_bars()
    saved = {k: os.environ.get(k) for k in ("HF_HUB_DISABLE_XET", "HF_HUB_DISABLE_PROGRESS_BARS")}
    before = constants.HF_HUB_DISABLE_XET
    os.environ.update(HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
    constants.HF_HUB_DISABLE_XET = True
    try:
        yield
    finally:
        constants.HF_HUB_DISABLE_XET = before
        if bars:
            enable_progress_bars()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@dataclass
class HubRegistry:
    repo: object
    server: Registry
    tokens: dict[str, str]
    folder: Path
    extra: dict = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.server.url

    def api(self, who: str = "writer"):
        from huggingface_hub import HfApi

        return HfApi(endpoint=self.url, token=self.tokens[who])

    def client(self, who: str = "writer"):
        return self.server.client(self.tokens[who])


@contextlib.contextmanager
def hub_registry(db: str, folder: Path, models: dict, args: tuple[str, ...] = (), env=None):
    """A HubRegistry on DB ("sqlite" or "postgresql") in FOLDER, the tiny base registered."""
    with contextlib.ExitStack() as stack:
        url = None if db == "sqlite" else stack.enter_context(pg_database())
        repo, _ = api.init(folder / "repo", url, **(env or {}))
        stack.callback(repo.close)
        api.base_add(repo, "tiny-llama", models["base"])
        tokens = {n: create_token(repo.root, n, r, g) for n, (r, g) in TOKENS.items()}
        server = start_registry(repo.root, args=args)
        stack.callback(server.stop)
        stack.enter_context(no_xet())
        yield HubRegistry(repo, server, tokens, folder)


def variant(adapter: Path, dest: Path, tag: str, **files: bytes | str) -> Path:
    """A copy of ADAPTER whose config differs (a new commit), with FILES added (name: bytes)."""
    shutil.copytree(adapter, dest)
    config = json.loads((dest / "adapter_config.json").read_text())
    config["revision"] = tag
    (dest / "adapter_config.json").write_text(json.dumps(config))
    for name, data in files.items():
        target = dest / name.replace("__", "/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data if isinstance(data, bytes) else data.encode())
    return dest


def files_of(folder) -> dict[str, bytes]:
    folder = Path(folder)
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and ".cache" not in p.parts
    }
