"""The CPU tier: versions that served stay loaded within a bound, so a rollback loads nothing."""

from __future__ import annotations

import os

import pytest

from mint.runtime.loader import SharedBase
from mint.runtime.runtime import Runtime

from support.runtime import (
    make_spec,
    random_router,
    sha256_file,
    store_blob,
    stored_adapter,
    verify_blobs,
)


@pytest.fixture(scope="module")
def versions(demo, tmp_path_factory):
    """Three versions that share the four experts and differ by their router (5 adapters each;
    7 distinct in all)."""
    objects = tmp_path_factory.mktemp("store") / "objects"
    experts = {label: stored_adapter(objects, p) for label, p in demo.experts.items()}
    return tuple(
        make_spec(demo, experts=experts, router=stored_adapter(objects, router))
        for router in (demo.router, demo.degraded_router, random_router())
    )


class CountingVerify:
    def __init__(self):
        self.calls = 0

    def __call__(self, spec):
        self.calls += 1
        verify_blobs(spec)


def tiered(demo, versions, max_cpu_adapters: int) -> tuple[Runtime, CountingVerify]:
    verify = CountingVerify()
    specs = {spec.id: spec for spec in versions}
    runtime = Runtime(
        SharedBase.load(demo.base),
        verify=verify,
        load_spec=specs.__getitem__,
        resolve=lambda: versions[0].id,
        max_cpu_adapters=max_cpu_adapters,
    )
    runtime.update(versions[0])
    return runtime, verify


def user(text):
    return [{"role": "user", "content": text}]


def test_a_rollback_to_a_resident_version_loads_nothing(demo, versions):
    good, degraded, _ = versions
    runtime, verify = tiered(demo, versions, max_cpu_adapters=64)
    try:
        serving_good = runtime.active
        assert runtime.update(degraded)
        assert runtime.resident() == [good.id]
        loads, verified = runtime.base.loads, verify.calls
        assert runtime.update_to(good.id)  # a rollback, as a channel follower does it
        assert runtime.active is serving_good  # the very engine that served before
        assert (runtime.base.loads, verify.calls) == (loads, verified)
        assert runtime.history[-1].resident and not runtime.history[-2].resident
        assert runtime.resident() == [degraded.id]
        assert runtime.turn(user("align button center")).route == "ui"
        assert "mint_resident_versions 1" in runtime.metrics.render()
    finally:
        runtime.close()


def test_without_a_tier_a_rollback_loads_again(demo, versions):
    good, degraded, _ = versions
    runtime, verify = tiered(demo, versions, max_cpu_adapters=0)
    try:
        runtime.update(degraded)
        assert runtime.resident() == []
        loads, verified = runtime.base.loads, verify.calls
        runtime.update(good)
        assert runtime.base.loads == loads + 1  # the router; the experts stayed, shared
        assert verify.calls == verified + 1 and not runtime.history[-1].resident
    finally:
        runtime.close()


def test_the_bound_evicts_the_least_recently_used_version(demo, versions):
    good, degraded, other = versions
    runtime, _ = tiered(demo, versions, max_cpu_adapters=6)  # one spare router's room
    try:
        runtime.update(degraded)
        assert runtime.resident() == [good.id]  # 6 adapters loaded: within the bound
        runtime.update(other)
        assert runtime.resident() == [degraded.id]  # 7 > 6: good, the oldest, went
        assert len(runtime.base.loaded()) == 6
        loads = runtime.base.loads
        runtime.update(degraded)
        assert runtime.base.loads == loads and runtime.resident() == [other.id]
        runtime.update(good)
        assert runtime.base.loads == loads + 1 and runtime.resident() == [degraded.id]
    finally:
        runtime.close()


def test_a_resident_version_held_by_a_request_is_evicted_only_when_it_ends(demo, versions):
    good, degraded, other = versions
    runtime, _ = tiered(demo, versions, max_cpu_adapters=0)
    try:
        lease = runtime.lease()
        runtime.update(degraded)
        assert runtime.resident() == [good.id]  # over the bound, but a request holds it
        assert lease.engine.route(user("align button center")).label == "ui"
        lease.release()
        assert runtime.resident() == []
        assert lease.engine.router not in runtime.base.loaded()
    finally:
        runtime.close()


def test_staging_the_serving_version_again_keeps_one_engine_of_it(demo, versions):
    good, degraded, _ = versions
    runtime, _ = tiered(demo, versions, max_cpu_adapters=64)
    try:
        runtime.update(good)  # the same version again: a second engine, sharing adapters
        assert runtime.resident() == []  # the first one is not kept beside the one serving
        runtime.update(degraded)
        assert runtime.resident() == [good.id]
        runtime.update(good)
        assert runtime.resident() == [degraded.id]
    finally:
        runtime.close()
    assert runtime.resident() == [] and runtime.leases() == 0


def test_store_blob_layout_is_verifiable(tmp_path):
    """The helper above lays blobs out as mint's store does, read-only, so verify can check."""
    source = tmp_path / "w.bin"
    source.write_bytes(b"weights")
    blob = store_blob(tmp_path / "objects", source)
    assert blob.parent.name + blob.name == sha256_file(source)
    assert not os.access(blob, os.W_OK) or os.geteuid() == 0
