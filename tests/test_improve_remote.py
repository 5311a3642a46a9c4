"""`mint --repo URL improve` against a real `mint registry serve`: every round of the loop (a
canary started, waiting, promoted, idle, rolled back under the live floor, idle) ends as the
same round on a local twin built the same way, and leaves the same history on both.

Each round runs as a real `python -m mint` process, as a user would run it; the registry
records the token's identity for every write, so the token is named as the loop is."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from mint import api
from mint.porcelain.improve import LOOP_IDENTITY

from conftest import Result, one_line_error, snapshot
from support.loop import add_traces, quality_loop
from support.registry import create_token, running_registry

ROUND = ("improve", "macaron", "--contract", "quality", "--json")
_ID = re.compile(r"\b[0-9a-f]{12,64}\b")
_EVALUATION = re.compile(r"evaluation \d+")


def _mint(repo: str, env: dict, *args: str) -> Result:
    """`python -m mint --repo REPO ARGS...`, a real process."""
    done = subprocess.run(
        [sys.executable, "-m", "mint", "--repo", repo, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def _masked(text: str | None) -> str | None:
    """TEXT with commit ids and evaluation ids masked: the two sides' ids differ."""
    return _EVALUATION.sub("evaluation N", _ID.sub("<id>", text)) if text else text


def _shape(result: Result) -> tuple:
    """A round as both sides must agree on it."""
    assert result.code == 0, result
    r = json.loads(result.out)
    steps = [
        (
            s["action"],
            s["channel"],
            _masked(s["detail"]),
            s["entry"] is not None,
            s["evaluation"] is not None,
        )
        for s in r["steps"]
    ]
    return r["line"], r["contract"], r["outcome"], steps


def _moves(repo, ref: str) -> list[tuple]:
    return [
        (m.action, m.by, _masked(m.reason), m.contract is not None, len(m.evaluations))
        for m in api.history(repo, ref)
    ]


@pytest.fixture
def sides(repo, models, tmp_path):
    """The loop's repository behind a registry (a maintainer token named as the loop, and a
    reader's), and a local twin built the same way. Yields a dict of what the test needs."""
    for folder in ("remote", "twin-files"):
        (tmp_path / folder).mkdir()
    remote_ids, remote_score = quality_loop(repo, models, tmp_path / "remote")
    twin, _ = api.init(tmp_path / "twin", None)
    twin_ids, twin_score = quality_loop(twin, models, tmp_path / "twin-files")
    for side, score in ((repo, remote_score), (twin, twin_score)):
        router2 = api.commit(side, "router", models["a2"], "router v2", author="al").id
        score(router2, 0.8)
    writer = create_token(repo.root, LOOP_IDENTITY, "maintainer")
    reader = create_token(repo.root, "rita", "reader")
    env = dict(os.environ)
    env |= {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("MINT_USER", None)
    with running_registry(repo.root) as registry:
        yield {
            "url": registry.url,
            "twin": twin,
            "ids": (remote_ids, twin_ids),
            "env": env | {"MINT_TOKEN": writer},
            "reader_env": env | {"MINT_TOKEN": reader},
        }
    twin.close()


@pytest.mark.one_database(
    "postgresql",
    "its local twin is on SQLite, so one run compares the two; test_loop runs the rounds on both",
)
def test_every_round_over_a_registry_ends_as_the_local_one(sides, repo):
    url, twin, env = sides["url"], sides["twin"], sides["env"]
    remote_ids, twin_ids = sides["ids"]

    def both() -> tuple:
        remote = _shape(_mint(url, env, *ROUND))
        local = _shape(_mint(str(twin.root), env, *ROUND))
        assert remote == local
        return remote

    # a reader may look but not write: one line, and nothing changed on the registry
    before = snapshot(repo)
    one_line_error(_mint(url, sides["reader_env"], *ROUND), "reader")
    assert snapshot(repo) == before

    first = both()
    assert first[2] == "canary-started"
    assert [s[0] for s in first[3]] == ["derive", "evaluate", "promote", "canary-start"]
    canaries = [api.canary_of(side, "macaron@production") for side in (repo, twin)]
    assert [c.started_by for c in canaries] == [LOOP_IDENTITY, LOOP_IDENTITY]
    cands = [c.candidate for c in canaries]
    routers = [
        api.show(side, c).config["router"]["adapter"] for side, c in zip((repo, twin), cands)
    ]
    assert routers == [api.resolve(repo, "router"), api.resolve(twin, "router")]

    # too little live feedback: both wait, and the registry's round writes nothing
    for side, cand in zip((repo, twin), cands):
        add_traces(side, cand, "canary", [0.9, 0.9])
    before = snapshot(repo)
    assert both()[2] == "waiting"
    assert snapshot(repo) == before

    for side, cand, ids in zip((repo, twin), cands, (remote_ids, twin_ids)):
        add_traces(side, ids["set"], "production", [0.2] * 6)
        add_traces(side, cand, "canary", [0.9] * 4)
    promoted = both()
    assert promoted[2] == "promoted"
    assert [s[0] for s in promoted[3]] == ["promote", "canary-stop"]
    assert both()[2] == "idle"

    # the new holder falls under the live floor (read from the registry's traces)
    for side, cand in zip((repo, twin), cands):
        add_traces(side, cand, "production", [0.0] * 5)
    back = both()
    assert back[2] == "rolled-back"
    assert "mean 0.000" in back[3][0][2] and "upper bound 0.434 < min_score 0.5" in back[3][0][2]
    assert both()[2] == "idle"  # the rolled-back set is not tried again

    for ref in ("macaron@production", "macaron@staging"):
        assert _moves(repo, ref) == _moves(twin, ref)
    holders = [next(s for s in api.status(side) if s.name == "macaron") for side in (repo, twin)]
    assert [h.channels["production"] for h in holders] == [remote_ids["set"], twin_ids["set"]]
