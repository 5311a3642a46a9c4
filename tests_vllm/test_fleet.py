"""What serves, reported from vLLM (issue 38): the plugin inside a real vLLM server reports the
names that move it serves (`chat@production`), and a move is fetched and verified at once, so
`--wait` converges before any request asks for the new version; `mint serve --engine vllm`
reports the set it serves, as engine `vllm`."""

from __future__ import annotations

from harness import complete, served_name

from mint import api
from mint.bases import fingerprint_path

from support import wait_until

TIMEOUT = 120.0  # liveness only


def member(remote, ref: str, instance: str):
    try:
        views = api.fleet(remote, ref)
    except LookupError:
        return None
    return next((m for v in views for m in v.members if m.instance == instance), None)


def test_the_front_end_reports_the_set_it_serves_on_vllm(world, front):
    remote = world.remote()
    good = world.sets["good"]
    wait_until(lambda: member(remote, "macaron@production", "front-1") is not None, "front-1")
    m = member(remote, "macaron@production", "front-1")
    assert (m.engine, m.commit, m.holder, m.state) == ("vllm", good, True, "live")
    assert m.base == fingerprint_path(world.base)


def test_the_plugin_reports_a_name_it_serves_and_its_moves(world, vllm):
    remote = world.remote()
    old, new = world.commits["chat"], world.commits["chat2"]
    assert served_name(complete(vllm.url, "chat@production")) == f"chat@{old}"
    wait_until(lambda: member(remote, "chat@production", "vllm-1") is not None, "vllm-1")
    m = member(remote, "chat@production", "vllm-1")
    assert (m.engine, m.commit, m.holder) == ("vllm-plugin", old, True)
    api.promote(remote, new, "production", by="ann")
    try:
        done = api.fleet_wait(remote, "chat@production", new, timeout=TIMEOUT)
        assert done.instances == ["vllm-1"]
        wait_until(
            lambda: (
                served_name(complete(vllm.url, "chat@production", max_tokens=1)) == f"chat@{new}"
            ),
            "the next request answers from the new commit",
            TIMEOUT,
        )
    finally:
        api.rollback(remote, "chat@production", by="ann")
    done = api.fleet_wait(remote, "chat@production", old, timeout=TIMEOUT)
    assert done.instances == ["vllm-1"]
    history = api.fleet_history(remote, "chat@production")
    assert [x.commit for x in history if x.instance == "vllm-1"] == [old, new, old]
