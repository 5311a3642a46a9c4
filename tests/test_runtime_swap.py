"""Hot swap on a real runtime: staging beside the serving version, failures, channel following."""

from __future__ import annotations

import os
import threading
import time

import pytest

from mint.errors import BaseMismatch, BlobCorrupt
from mint.runtime.errors import AdapterLoadError, NothingStaged, UnknownModel
from mint.runtime.loader import SharedBase
from mint.runtime.runtime import Runtime
from mint.runtime.server import ServerThread

from support.runtime import (
    adapter_files,
    ask_until,
    make_spec,
    random_router,
    serving,
    sha256_file,
    stored_adapter,
    verify_blobs,
)


@pytest.fixture(scope="module")
def versions(demo, tmp_path_factory):
    """Three set versions whose weights lie in an object store: good, degraded, one to corrupt."""
    objects = tmp_path_factory.mktemp("store") / "objects"
    experts = {label: stored_adapter(objects, p) for label, p in demo.experts.items()}
    return tuple(
        make_spec(demo, experts=experts, router=stored_adapter(objects, router))
        for router in (demo.router, demo.degraded_router, random_router())
    )


def corrupt(path: str) -> None:
    """Change one byte of a stored blob in place, as bit rot or a careless hand would (once)."""
    blob = os.path.basename(os.path.dirname(path)) + os.path.basename(path)
    if sha256_file(path) != blob:
        return  # already corrupt
    os.chmod(path, 0o644)
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 0xFF
    open(path, "wb").write(bytes(data))


@pytest.fixture
def runtime(demo, versions):
    runtime = serving(demo.base, versions[0], verify=verify_blobs)
    yield runtime
    runtime.close()


def following(demo, versions) -> tuple[Runtime, dict]:
    """A runtime that follows a channel held in a dict: `channel["commit"] = id` moves it."""
    specs = {s.id: s for s in versions}
    channel = {"commit": versions[0].id}
    runtime = Runtime(
        SharedBase.load(demo.base),
        verify=verify_blobs,
        resolve=lambda: channel["commit"],
        load_spec=specs.__getitem__,
        poll_interval=0.05,
    )
    return runtime, channel


def user(text):
    return [{"role": "user", "content": text}]


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_stage_loads_beside_the_serving_version_and_swap_switches(runtime, versions):
    good, degraded, _ = versions
    runtime.stage(degraded)
    assert runtime.active.id == good.id and runtime.staged.id == degraded.id
    assert runtime.turn(user("fix python bug")).set_id == good.id
    assert runtime.swap() == degraded.id
    assert runtime.active.id == degraded.id and runtime.staged is None
    assert runtime.turn(user("fix python bug")).set_id == degraded.id
    # the good router is unloaded; the shared experts stay, loaded once
    loaded = runtime.base.loaded()
    assert set(loaded) == set(runtime.active.adapter_names())
    assert runtime.metrics.swaps == 2 and runtime.metrics.failed_swaps == 0
    with pytest.raises(NothingStaged):
        runtime.swap()


def test_a_turn_names_the_set_or_an_expert_and_nothing_else(runtime, versions):
    assert runtime.turn(user("fix python bug"), model="macaron").route == "coding"
    direct = runtime.turn(user("fix python bug"), model="ui")
    assert direct.route == "ui" and direct.direct
    with pytest.raises(UnknownModel, match="gpt-4"):
        runtime.turn(user("fix python bug"), model="gpt-4")
    assert sum(runtime.metrics.requests.values()) == 2


def test_a_request_in_flight_finishes_on_the_version_it_started_on(runtime, versions):
    good, degraded, _ = versions
    lease = runtime.lease()
    runtime.update(degraded)
    assert runtime.active.id == degraded.id
    assert lease.engine.id == good.id
    assert lease.engine.route(user("align button")).label == "ui"  # its adapters are still loaded
    assert lease.engine.router in runtime.base.loaded()
    lease.release()
    assert lease.engine.router not in runtime.base.loaded()


def test_a_corrupt_or_mismatched_version_never_replaces_the_serving_one(
    runtime, versions, demo, tmp_path
):
    good, _, doomed = versions
    corrupt(doomed.router.weights)
    with pytest.raises(BlobCorrupt):
        runtime.stage(doomed)
    assert runtime.update(doomed) is False
    with pytest.raises(BaseMismatch):
        runtime.stage(make_spec(demo, fingerprint="f" * 64))
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "adapter_config.json").write_text((demo.router / "adapter_config.json").read_text())
    (garbage / "adapter_model.safetensors").write_bytes(b"not safetensors at all")
    unverified = Runtime(runtime.base)  # without a verify callable the loader still refuses it
    with pytest.raises(AdapterLoadError):
        unverified.stage(make_spec(demo, router=adapter_files(garbage)))
    assert unverified.metrics.failed_swaps == 1
    assert runtime.active.id == good.id and runtime.staged is None
    assert runtime.metrics.failed_swaps == 3 and runtime.metrics.swaps == 1
    assert [r.ok for r in runtime.history] == [True, False, False, False]
    assert runtime.turn(user("fix python bug")).set_id == good.id
    assert "mint_swaps_failed_total 3" in runtime.metrics.render()


def test_the_follower_stages_and_swaps_when_the_channel_moves(demo, versions):
    good, degraded, doomed = versions
    runtime, channel = following(demo, versions)
    runtime.follow()
    try:
        wait_for(lambda: runtime.active is not None and runtime.active.id == good.id)
        channel["commit"] = degraded.id
        wait_for(lambda: runtime.active.id == degraded.id)
        corrupt(doomed.router.weights)
        channel["commit"] = doomed.id
        wait_for(lambda: runtime.metrics.failed_swaps >= 1)
        assert runtime.active.id == degraded.id
        channel["commit"] = "0" * 64  # a commit load_spec does not know
        wait_for(lambda: runtime.metrics.failed_swaps >= 2)
        channel["commit"] = good.id
        wait_for(lambda: runtime.active.id == good.id)
    finally:
        runtime.close()


def move_back_and_forth(runtime: Runtime, channel: dict, versions, results: list) -> None:
    """20 moves of the channel between good and degraded, two through the corrupt version."""
    good, degraded, doomed = versions
    for flip in range(20):
        target = degraded if flip % 2 == 0 else good
        channel["commit"] = target.id
        wait_for(lambda t=target: runtime.active.id == t.id)
        if flip % 10 == 5:  # a corrupt version in between: refused, the old one keeps serving
            channel["commit"] = doomed.id
            failed = runtime.metrics.failed_swaps
            wait_for(lambda f=failed: runtime.metrics.failed_swaps > f)
            channel["commit"] = target.id
        wait_for(lambda n=2 * (flip + 1): len(results) >= n)


def test_many_swaps_under_concurrent_requests_fail_no_request(demo, versions):
    good, degraded, doomed = versions
    runtime, channel = following(demo, versions)
    corrupt(doomed.router.weights)
    runtime.update(good)
    runtime.follow()
    results, stop = [], threading.Event()
    with ServerThread(runtime) as url:
        asking = (url, stop, results, "fix bug")
        threads = [threading.Thread(target=ask_until, args=asking) for _ in range(3)]
        for thread in threads:
            thread.start()
        try:
            move_back_and_forth(runtime, channel, versions, results)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
            runtime.close()

    assert results and all(status == 200 for _, _, status, _ in results)
    assert {body["mint"]["set"] for *_, body in results} == {good.id, degraded.id}
    swaps = [r for r in runtime.history if r.ok]
    assert len(swaps) == 21 and runtime.metrics.failed_swaps >= 2
    spans = [(r.new, r.at, n.at if n else float("inf")) for r, n in zip(swaps, swaps[1:] + [None])]
    for started, ended, _, body in results:
        served = body["mint"]["set"]
        assert any(
            c == served and since <= ended and started <= until for c, since, until in spans
        )
