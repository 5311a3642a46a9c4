"""The vLLM plugin's reports of what it serves, without vLLM (`mint.vllm.fleet`, over the same
`AdapterSource` and `Follower` the resolver uses), on SQLite and PostgreSQL: a name asked for
is reported served; when it moves, the new commit is fetched and verified before it is
reported (and before the resolver retires vLLM's entry); a refused one is reported with its
reason while the old version serves on; a goodbye shows the server stopped. The resolver's
glue inside a real vLLM server is `make test-vllm`'s (tests_vllm/test_fleet.py)."""

from __future__ import annotations

from pathlib import Path

from mint import api
from mint.bases import fingerprint_path
from mint.vllm.adapters import AdapterSource
from mint.vllm.fleet import PluginFleet, default_instance
from mint.vllm.follow import Follower

from support import wait_until

ME = "tester"
NAME = "chat@production"


def member(repo):
    views = api.fleet(repo, NAME)
    return views[0].members[0] if views and views[0].members else None


def test_the_plugin_reports_what_it_serves_a_move_and_a_refusal(repo, models, tmp_path):
    key = api.key_generate(tmp_path / "keys")
    api.key_add(repo, "alice", Path(key.public_key).read_text(), by=ME)
    api.base_add(repo, "tiny-llama", models["base"])
    signed = [
        api.commit(repo, "chat", models[k], k, author=ME, sign=key.private_key).id
        for k in ("a1", "a2")
    ]
    unsigned = api.commit(repo, "chat", models["a3"], "a3", author=ME).id
    api.promote(repo, signed[0], "production", by=ME)
    source = AdapterSource(repo, tmp_path / "cache", require_signed=True)
    env = {"MINT_INSTANCE": "vllm-a", "MINT_REPORT_INTERVAL": "0.5"}
    fleet, base = PluginFleet(source, env), str(models["base"])
    # what the resolver does on the first request for the name
    fleet.serving(NAME, source.fetch(base, NAME).commit, base)
    wait_until(lambda: member(repo) is not None, "the plugin's first report")
    m = member(repo)
    assert (m.instance, m.engine, m.commit, m.holder) == ("vllm-a", "vllm-plugin", signed[0], True)
    assert m.base == fingerprint_path(models["base"])
    staged = []
    follower = Follower(
        source.commit_of, lambda asked, old, new: staged.append(fleet.staged(asked, new))
    )
    follower.watch(NAME, "chat", "production", signed[0])
    api.promote(repo, signed[1], "production", by=ME)
    assert follower.check() == [NAME] and staged == [True]
    wait_until(lambda: member(repo).commit == signed[1], "the move reported")
    assert (Path(source.cache) / signed[1]).is_dir()  # fetched and verified already
    follower.watch(NAME, "chat", "production", signed[1])  # as the resolver re-watches it
    api.promote(repo, unsigned, "production", by=ME)
    assert follower.check() == [NAME] and staged == [True, False]
    wait_until(lambda: member(repo).failure is not None, "the refusal reported")
    m = member(repo)
    assert (m.commit, m.holder, m.failure.commit, m.failure.kind) == (
        signed[1], False, unsigned, "NotVerified"
    )  # fmt: skip
    assert "carries no signature" in m.failure.reason
    assert not (Path(source.cache) / unsigned).exists()
    assert fleet.staged(NAME, unsigned) is False  # refused a moment ago: not fetched again yet
    fleet.close()
    assert member(repo).state == "stopped"
    assert fleet.reporter.stats()["dropped"] == 0


def test_the_plugin_names_itself_by_host_and_vllm_port():
    assert default_instance(["vllm", "--model", "m", "--port", "8123"]).endswith(":8123")
    assert default_instance(["vllm", "--port=9000"]).endswith(":9000")
    assert default_instance(["vllm"]).endswith(":8000")
