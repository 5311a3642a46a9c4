"""`mint pull` against a real hub: olah serving git repos, driven by the unmodified
huggingface_hub client. Nothing in the pull path is mocked.

Every test runs on SQLite and on PostgreSQL (the `repo` fixture). Each test gets its own HF
cache (HF_HOME in a tmp folder); mint reads the HF_* variables when it pulls.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import uuid
from pathlib import Path

import pytest

from conftest import one_line_error, snapshot
from hubserver import HubServer, closed_port_endpoint, gated_hub

from mint import api, hub
from mint import repo as repo_mod


@pytest.fixture(scope="session")
def hubsrv(tmp_path_factory, models):
    """One olah for the session, serving the repos that tests only read."""
    server = HubServer(tmp_path_factory.mktemp("hub"))
    ad = server.repo("org/ad")
    ad.commit({"": models["a1"], "README.md": "# ad\n"}, "first")
    ad.tag("v1")
    nocfg = server.repo("org/nocfg")
    nocfg.commit({"README.md": "no adapter here\n", "model.safetensors": (models["a1"] / "adapter_model.safetensors")}, "x")
    pickle = server.repo("org/pickled")
    pickle.commit({"adapter_config.json": models["a1"] / "adapter_config.json", "adapter_model.bin": b"\x80\x04" + b"0" * 400}, "x")
    other = server.repo("org/otherbase")
    cfg = json.loads((models["a1"] / "adapter_config.json").read_text())
    other.commit({"": models["a1"], "adapter_config.json": json.dumps({**cfg, "base_model_name_or_path": "meta-llama/Other-7B"})}, "x")
    _set_repo(server.repo("org/macaron"), models)
    server.start("org/ad")
    yield server
    server.stop()


def _set_repo(r, models):
    mol = """name = "macaron"
protocol = "mol/1"
base = "tiny-llama"
[router]
adapter = "./router"
labels = ["chat", "coding"]
prompt = "route.md"
default = "chat"
[experts]
chat = "chat"
coding = "./coding"
[summary]
adapter = "chat"
prompt = "summary.md"
"""
    r.commit({"mol.toml": mol, "route.md": "Route the request.\n", "summary.md": "Summarise.\n",
              "router": models["a1"], "chat": models["a2"], "coding": models["a3"]}, "set v1")  # fmt: skip
    r.tag("v1")


@pytest.fixture
def hf_env(monkeypatch, tmp_path, hubsrv):
    """A fresh HF cache and the session hub; no token, online."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", hubsrv.endpoint)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "hf"


@pytest.fixture
def based(mint, models, hf_env):
    """The `mint` runner on a repo with the tiny base registered, and the hub in the env."""
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    return mint


# --- one revision -------------------------------------------------------------


def test_tag_branch_and_sha_of_one_hub_commit_give_one_commit(based, repo, hubsrv):
    sha = hub_sha(hubsrv, "org/ad", "v1")
    first = based("pull", "hf://org/ad@v1", "--json")
    assert first.code == 0, first
    [pulled] = first.json()["pulled"]
    assert pulled["created"] and pulled["sha"] == sha and pulled["line"] == "ad"

    for rev in ("main", sha, sha[:10]):
        again = based("pull", f"hf://org/ad@{rev}")
        assert again.code == 0, again
        assert "already in the store" in again.out and pulled["id"][:12] in again.out
    assert based("pull", "hf://org/ad", "--as", "elsewhere").code == 0  # another line: still the same commit

    assert [c.id for c in api.log(repo)] == [pulled["id"]]
    d = api.show(repo, "ad")
    assert d.provenance == {"source": "hf", "repo": "org/ad", "revision": "v1", "sha": sha}
    assert set(d.files) == {"adapter_config.json", "adapter_model.safetensors", "README.md"}
    shown = based("show", "ad")
    assert f"provenance.sha:{sha}" in shown.out.replace(" ", "")


def test_pull_defaults_to_main_on_the_repo_name_and_tags(based, repo, hubsrv, models, tmp_path):
    r = based("pull", "hf://org/ad", "--tag", "stable")
    assert r.code == 0, r
    assert "tagged ad@stable" in r.out
    d = api.show(repo, "ad@stable")
    assert d.provenance["revision"] == "main" and d.provenance["sha"] == hub_sha(hubsrv, "org/ad", "main")
    # the files are the hub's bytes, and a checkout loads in PEFT
    out = api.checkout(repo, "ad@stable", tmp_path / "out")
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        assert (Path(out.path) / name).read_bytes() == (models["a1"] / name).read_bytes()


def test_pull_prints_no_progress_when_piped(based):
    r = based("pull", "hf://org/ad@v1")
    assert r.code == 0, r
    assert r.err == ""


def test_pull_shows_progress_on_a_tty(repo, models, hf_env, hubsrv):
    assert api.base_add(repo, "tiny-llama", models["base"])
    code, text = _run_on_tty([sys.executable, "-m", "mint", "--repo", str(repo.root), "pull", "hf://org/ad@v1"])
    assert code == 0, text
    assert "Fetching" in text or "%|" in text, text
    assert "pulled hf://org/ad@v1" in text


def _run_on_tty(argv: list[str], timeout: float = 120) -> tuple[int, str]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a 0x0 terminal gets no bars
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=os.environ.copy())
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], timeout)
        if not ready:
            proc.kill()
            break
        try:
            data = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=30), b"".join(chunks).decode(errors="replace")


# --- every tag ------------------------------------------------------------------


def test_all_tags_oldest_first_then_only_new_tags(based, repo, hubsrv, models):
    repo_id = f"org/tagged-{uuid.uuid4().hex[:8]}"
    g = hubsrv.repo(repo_id)
    # names out of alphabetical order on purpose: hub order is commit order
    g.commit({"": models["a1"]}, "one")
    g.tag("zeta")
    g.commit({"": models["a2"]}, "two")
    g.tag("alpha")
    g.tag("also-alpha")  # a second tag on one commit
    g.commit({"README.md": "three\n"}, "three")
    g.tag("release/3")

    r = based("pull", f"hf://{repo_id}", "--all-tags", "--as", "tg", "--json")
    assert r.code == 0, r
    items = r.json()["pulled"]
    assert [i["revision"] for i in items] == ["zeta", "alpha", "also-alpha", "release/3"]
    assert [i["created"] for i in items] == [True, True, False, True]
    ids = {i["revision"]: i["id"] for i in items}
    assert ids["alpha"] == ids["also-alpha"]
    # lineage follows hub order
    assert [c.id for c in api.log(repo, "tg")] == [ids["release/3"], ids["alpha"], ids["zeta"]]
    tags = {t.name: t.target for t in api.tag_list(repo, "tg")}
    assert tags == {"zeta": ids["zeta"], "alpha": ids["alpha"], "also-alpha": ids["alpha"], "release-3": ids["release/3"]}
    assert api.show(repo, "tg@release-3").provenance["revision"] == "release/3"

    g.commit({"": models["a3"]}, "four")
    g.tag("v4")
    again = based("pull", f"hf://{repo_id}", "--all-tags", "--as", "tg", "--json")
    assert again.code == 0, again
    new = [i for i in again.json()["pulled"] if i["created"]]
    assert [i["revision"] for i in new] == ["v4"]
    assert api.show(repo, "tg@v4").parents == [ids["release/3"]]
    assert len(api.log(repo, "tg")) == 4


# --- sets -----------------------------------------------------------------------


def test_set_repo_pulls_as_adapter_commits_and_one_set_commit(based, repo, hubsrv, models):
    sha = hub_sha(hubsrv, "org/macaron", "v1")
    r = based("pull", "hf://org/macaron@v1", "--json")
    assert r.code == 0, r
    [item] = r.json()["pulled"]
    assert item["kind"] == "set" and item["line"] == "macaron"
    assert sorted(m["path"] for m in item["members"]) == ["chat", "coding", "router"]

    shown = based("show", "macaron", "--json")
    assert shown.code == 0, shown
    d = shown.json()
    assert d["provenance"]["sha"] == sha
    members = {(m["role"], m["label"]): m["id"] for m in d["members"]}
    by_path = {m["path"]: m["id"] for m in item["members"]}
    assert members[("router", "router")] == by_path["router"]
    assert members[("expert", "chat")] == by_path["chat"] == members[("summary", "summary")]
    assert members[("expert", "coding")] == by_path["coding"]
    assert d["files"]["route.md"]["sha256"] == hashlib.sha256(b"Route the request.\n").hexdigest()
    assert d["files"]["summary.md"]["sha256"] == hashlib.sha256(b"Summarise.\n").hexdigest()
    human = based("show", "macaron").out
    assert all(cid[:12] in human for cid in by_path.values())
    for path, cid in by_path.items():
        m = api.show(repo, cid)
        assert m.provenance == {"source": "hf", "repo": "org/macaron", "revision": "v1", "sha": sha, "path": path}
        assert m.line == path
    src = {"router": "a1", "chat": "a2", "coding": "a3"}
    for path, cid in by_path.items():
        blob = api.show(repo, cid).files["adapter_model.safetensors"].sha256
        assert repo.store.local_path(blob).read_bytes() == (models[src[path]] / "adapter_model.safetensors").read_bytes()

    again = based("pull", "hf://org/macaron@main")
    assert again.code == 0 and "already in the store" in again.out, again


# --- offline --------------------------------------------------------------------


def test_offline_pull_from_the_cache_with_the_server_stopped(repo, models, tmp_path, monkeypatch):
    api.base_add(repo, "tiny-llama", models["base"])
    hf_home = tmp_path / "hf"
    with HubServer(tmp_path / "hub") as own:
        g = own.repo("org/off")
        g.commit({"": models["a2"]}, "one")
        g.tag("v1")
        sha = g.head()
        own.start("org/off")
        # warm the HF cache with a pull into a scratch repository
        scratch, _ = repo_mod.init(tmp_path / "scratch")
        api.base_add(scratch, "tiny-llama", models["base"])
        online = hub.HubSettings.from_env({"HF_HOME": str(hf_home), "HF_ENDPOINT": own.endpoint})
        assert hub.pull(scratch, "hf://org/off@v1", settings=online).pulled[0].created
        scratch.close()
        endpoint = own.endpoint
    # the server is stopped now
    env = {**_clean_env(), "HF_HOME": str(hf_home), "HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "1"}
    ok = _mint_subprocess(repo, env, "pull", "hf://org/off@v1", "--json")
    assert ok.returncode == 0, ok.stderr
    [item] = json.loads(ok.stdout)["pulled"]
    assert item["created"] and item["sha"] == sha
    assert api.show(repo, "off").provenance == {"source": "hf", "repo": "org/off", "revision": "v1", "sha": sha}
    by_sha = _mint_subprocess(repo, env, "pull", f"hf://org/off@{sha}")
    assert by_sha.returncode == 0 and "already in the store" in by_sha.stdout, by_sha.stderr

    before = snapshot(repo)
    cold = _mint_subprocess(repo, {**env, "HF_HOME": str(tmp_path / "empty")}, "pull", "hf://org/off@v1", "--as", "cold")
    assert cold.returncode != 0
    [line] = cold.stderr.strip().splitlines()
    assert "needs the network" in line
    assert snapshot(repo) == before


def _clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}


def _mint_subprocess(repo, env, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mint", "--repo", str(repo.root), *args],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_offline_in_process_reads_the_env_at_call_time(based, repo, hf_env, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = snapshot(repo)
    one_line_error(based("pull", "hf://org/ad@v1"), "needs the network")
    assert snapshot(repo) == before


# --- errors: one line, non-zero exit, nothing stored ------------------------------


@pytest.mark.parametrize(
    "uri, extra, expect",
    [
        ("hf://org/nope", [], "no hub repo org/nope"),
        ("hf://org/ad@nope", [], "has no revision 'nope'"),
        ("hf://org/nocfg", [], "no adapter_config.json"),
        ("hf://org/pickled", [], "adapter_model.bin is a pickle"),
        ("hf://org/otherbase", [], "is not a registered base"),
        ("hf://org/ad@v1", ["--base", "nope"], "base 'nope' is not registered"),
        ("org/ad", [], "is not a hub address"),
        ("hf://org/ad@v1", ["--as", "bad/line"], "invalid line name"),
    ],
)
def test_errors(based, repo, uri, extra, expect):
    before = snapshot(repo)
    one_line_error(based("pull", uri, *extra), expect)
    assert snapshot(repo) == before


def test_gated_repo_without_a_token(based, repo, monkeypatch):
    # olah cannot gate a repo (its mirror metadata is never gated), so this endpoint answers
    # as huggingface.co does for a gated repo; the client and mint run unchanged.
    before = snapshot(repo)
    with gated_hub() as endpoint:
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        line = one_line_error(based("pull", "hf://org/gated@v1"), "is gated")
    assert "HF_TOKEN" in line
    assert snapshot(repo) == before


def test_unreachable_server(based, repo, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", closed_port_endpoint())
    before = snapshot(repo)
    one_line_error(based("pull", "hf://org/ad@v1"), "cannot reach the hub")
    assert snapshot(repo) == before


def test_all_tags_refuses_a_revision(based):
    one_line_error(based("pull", "hf://org/ad@v1", "--all-tags"), "--all-tags")
    assert based("pull", "hf://org/ad", "--all-tags", "--tag", "x").code != 0


# --- library pieces --------------------------------------------------------------


def test_settings_are_read_when_asked(tmp_path):
    s = hub.HubSettings.from_env({"HF_HOME": str(tmp_path), "HF_ENDPOINT": "http://h:1/", "HF_HUB_OFFLINE": "yes"})
    assert (s.endpoint, s.cache_dir, s.offline, s.token) == ("http://h:1", str(tmp_path / "hub"), True, None)
    (tmp_path / "token").write_text("hf_abc\n")
    assert hub.HubSettings.from_env({"HF_HOME": str(tmp_path)}).token == "hf_abc"
    assert hub.HubSettings.from_env({"HF_HOME": str(tmp_path), "HF_TOKEN": "t"}).token == "t"


def test_uris_and_tag_names():
    assert hub.parse_uri("hf://org/x@v1") == hub.HubUri("org/x", "v1")
    assert hub.parse_uri("hf://org/x") == hub.HubUri("org/x", None)
    for bad in ("org/x", "hf://x", "hf://org/x@", "hf://org/../x"):
        with pytest.raises(hub.InvalidHubUri):
            hub.parse_uri(bad)
    assert hub.mint_tag_name("release/2") == "release-2"
    assert hub.mint_tag_name("v1.0") == "v1.0"


def hub_sha(hubsrv, repo_id: str, rev: str) -> str:
    org, name = repo_id.split("/")
    return subprocess.run(
        ["git", "rev-parse", rev], cwd=hubsrv.mirrors / "models" / org / name,
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
