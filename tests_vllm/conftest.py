"""Fixtures of the vLLM tests (`make test-vllm`), each built once per run: the demo MoL on a
base vLLM's CPU attention accepts, a repository holding it behind a real `mint registry
serve`, ONE vLLM server with mint's plugin (MINT_REPO the registry, MINT_TOKEN an admin's,
MINT_INSTANCE vllm-1), and `mint serve macaron@production --engine vllm` (instance front-1) in
front of it; both report what they serve to the registry.

The repository (see `World`): the base `tiny-llama`; the experts chat, agent, coding and ui,
each tagged v1; two router commits and two versions of the set `macaron` (the trained router,
then the degraded one, which routes about half the requests wrongly); `macaron@production`
and `chat@production` on the first versions; a second commit on `chat` (not promoted); a line
`spare` that only the plugin's own tests ask for; and an adapter for another base
(`other-llama`, one layer) on the line `otherbase`. Tokens: `admin`, and `outsider`, a reader
of the lines `other*` only.

The tests import `support` from tests/ (the registry and `mint serve` helpers of the main
suite) and `harness` from here.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from harness import VllmServer, start_front, start_vllm, vllm_python  # noqa: E402

from support.registry import Registry, create_token, start_registry  # noqa: E402
from support.runtime import commit_demo  # noqa: E402
from support.serving import Served  # noqa: E402

BY = "ann"


@dataclass
class World:
    """The demo in a repository behind a registry: what the tests ask for, by name."""

    files: object  # mint.examples.train.DemoFiles
    root: Path  # the local repository the registry serves
    registry: Registry
    tokens: dict[str, str]  # admin, outsider
    commits: dict[str, str]  # chat, agent, coding, ui (tagged v1), chat2, spare, otherbase
    sets: dict[str, str]  # good (macaron@production), degraded
    folder: Path  # scratch space of the run
    remotes: list = field(default_factory=list)

    @property
    def base(self) -> Path:
        return self.files.base

    def remote(self):
        """The registry as a repository, acting as the admin (writes go through it, so that
        every follower hears of them)."""
        from mint.remote.repo import RemoteRepo

        repo = RemoteRepo(self.registry.url, self.tokens["admin"], cache=self.folder / "blobs")
        self.remotes.append(repo)
        return repo

    def heldout(self) -> list[dict]:
        text = Path(self.files.heldout_data).read_text()
        return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    """The demo MoL with a head size of 64 (hidden 128, 2 heads): trained once per run."""
    from mint.examples.train import build_demo

    return build_demo(tmp_path_factory.mktemp("demo"), hidden=128, heads=2)


def build_repository(root: Path, files, folder: Path) -> tuple[dict, dict]:
    """The demo committed into a new repository at ROOT (see the module's docstring):
    (commits, sets)."""
    from mint import api
    from mint.examples.tiny import build_adapter, build_base

    repo, _ = api.init(root)
    try:
        routers = {"good": files.router, "degraded": files.degraded_router}
        ids = commit_demo(repo, files, folder / "set", routers, by=BY)
        sets = {name: got["set"] for name, got in ids.items()}
        api.promote(repo, sets["good"], "production", by=BY)
        commits = {label: api.resolve(repo, f"{label}@v1") for label in files.experts}
        api.promote(repo, commits["chat"], "production", by=BY)
        # another adapter on chat, for the channel to move to; and a line nobody else asks for
        commits["chat2"] = api.commit(repo, "chat", files.experts["agent"], "v2", author=BY).id
        commits["spare"] = api.commit(repo, "spare", files.experts["coding"], "s", author=BY).id
        # a base of one layer: its adapters have the same shapes as tiny-llama's, so only the
        # base's fingerprint tells them apart
        other = build_base(folder / "other-llama", hidden=128, heads=2, layers=1, seed=5)
        api.base_add(repo, "other-llama", other)
        adapter = build_adapter(other, folder / "otherbase-adapter", seed=3)
        commits["otherbase"] = api.commit(
            repo, "otherbase", adapter, "for another base", author=BY, base="other-llama"
        ).id
    finally:
        repo.close()
    return commits, sets


@pytest.fixture(scope="session")
def world(demo, tmp_path_factory):
    """The repository behind a running `mint registry serve`, with its tokens."""
    folder = tmp_path_factory.mktemp("world")
    root = folder / "repo"
    commits, sets = build_repository(root, demo, folder)
    tokens = {
        "admin": create_token(root, "admin", "admin"),
        "outsider": create_token(root, "outsider", "reader", ("other*",)),
    }
    registry = start_registry(root)
    world = World(demo, root, registry, tokens, commits, sets, folder)
    yield world
    for repo in world.remotes:
        if repo._client is not None:
            repo._client.close()
    registry.stop()


@pytest.fixture(scope="session")
def vllm(world, tmp_path_factory) -> VllmServer:
    """The one vLLM server of the run, its plugin on the registry with the admin's token."""
    python = vllm_python()
    if not python.exists():
        pytest.fail(f"no vLLM environment at {python}: run `make test-vllm`")
    env = {"MINT_REPO": world.registry.url, "MINT_TOKEN": world.tokens["admin"]}
    env |= {"MINT_INSTANCE": "vllm-1", "MINT_REPORT_INTERVAL": "1"}  # what it serves, reported
    server = start_vllm(python, world.base, tmp_path_factory.mktemp("vllm"), env)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def front(world, vllm, tmp_path_factory) -> Served:
    """`mint serve macaron@production --engine vllm` over the vLLM server."""
    served = start_front(
        world,
        tmp_path_factory.mktemp("front"),
        *("--engine", "vllm", "--engine-url", vllm.url),
        *("--instance", "front-1", "--report-interval", "1"),
    )
    yield served
    served.stop()
