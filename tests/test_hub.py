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

from mint import api
from mint.errors import InvalidConfig, InvalidHubUri, RefConflict
from mint.hf.settings import HubUri, mint_tag_name, parse_uri

from conftest import assert_whole, one_line_error, snapshot
from support.hubserver import HubServer, StubHub, closed_port_endpoint, gated_hub

pytestmark = pytest.mark.one_database(
    "sqlite",
    "a pull enters through the commit path, which test_commit and test_crash run on both"
    " databases",
)


@pytest.fixture(scope="session")
def hubsrv(tmp_path_factory, models):
    """One olah for the session, serving the repos that tests only read."""
    server = HubServer(tmp_path_factory.mktemp("hub"))
    ad = server.repo("org/ad")
    ad.commit({"": models["a1"], "README.md": "# ad\n"}, "first")
    ad.tag("v1")
    weights = models["a1"] / "adapter_model.safetensors"
    config = models["a1"] / "adapter_config.json"
    nocfg = server.repo("org/nocfg")
    nocfg.commit({"README.md": "no adapter here\n", "model.safetensors": weights}, "x")
    pickle = server.repo("org/pickled")
    pickle.commit(
        {"adapter_config.json": config, "adapter_model.bin": b"\x80\x04" + b"0" * 400}, "x"
    )
    other = server.repo("org/otherbase")
    cfg = {**json.loads(config.read_text()), "base_model_name_or_path": "meta-llama/Other-7B"}
    other.commit({"": models["a1"], "adapter_config.json": json.dumps(cfg)}, "x")
    _set_repo(server.repo("org/macaron"), models)
    server.start("org/ad")
    yield server
    server.stop()


def _mol(router: str = "./router", prompt: str = "route.md", base: str = "tiny-llama") -> str:
    """A set's mol.toml as a hub repo holds it: members are folders, prompts lie beside it."""
    return f"""name = "macaron"
protocol = "mol/1"
base = {json.dumps(base)}
[router]
adapter = {json.dumps(router)}
labels = ["chat", "coding"]
prompt = {json.dumps(prompt)}
default = "chat"
[experts]
chat = "chat"
coding = "./coding"
[summary]
adapter = "chat"
prompt = "summary.md"
"""


def _set_repo(r, models):
    r.commit(
        {
            "mol.toml": _mol(),
            "route.md": "Route the request.\n",
            "summary.md": "Summarise.\n",
            "router": models["a1"],
            "chat": models["a2"],
            "coding": models["a3"],
        },
        "set v1",
    )
    r.tag("v1")


@pytest.fixture
def hf_env(monkeypatch, tmp_path, hubsrv):
    """A fresh HF cache and the session hub; no token, online."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", hubsrv.endpoint)
    for var in (
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_TOKEN",
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
    ):
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
    # another line: still the same commit
    assert based("pull", "hf://org/ad", "--as", "elsewhere").code == 0

    assert [c.id for c in api.log(repo)] == [pulled["id"]]
    d = api.show(repo, "ad")
    assert d.provenance == {"source": "hf", "repo": "org/ad", "revision": "v1", "sha": sha}
    assert set(d.files) == {"adapter_config.json", "adapter_model.safetensors", "README.md"}
    shown = based("show", "ad")
    assert f"sha={sha}" in shown.out and "provenance" in shown.out


def test_pull_defaults_to_main_on_the_repo_name_and_tags(based, repo, hubsrv, models, tmp_path):
    r = based("pull", "hf://org/ad", "--tag", "stable")
    assert r.code == 0, r
    assert "tagged ad@stable" in r.out
    d = api.show(repo, "ad@stable")
    assert d.provenance["revision"] == "main"
    assert d.provenance["sha"] == hub_sha(hubsrv, "org/ad", "main")
    # the files are the hub's bytes, and a checkout loads in PEFT
    out = api.checkout(repo, "ad@stable", tmp_path / "out")
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        assert (Path(out.path) / name).read_bytes() == (models["a1"] / name).read_bytes()


def test_pull_prints_one_summary_line_and_no_bar_when_piped(based):
    r = based("pull", "hf://org/ad@v1")
    assert r.code == 0, r
    assert r.err == "" and len(r.out.splitlines()) == 1 and r.out.startswith("pulled "), r
    assert "downloaded 3 files" in r.out and "%|" not in r.out and "Fetching" not in r.out, r
    quiet = based("pull", "hf://org/ad@v1", "--as", "ad-quiet", "--quiet")
    assert quiet.code == 0 and quiet.err == "", quiet


def test_pull_shows_progress_on_a_tty(repo, models, hf_env, hubsrv):
    assert api.base_add(repo, "tiny-llama", models["base"])
    code, text = _run_on_tty(
        [sys.executable, "-m", "mint", "--repo", str(repo.root), "pull", "hf://org/ad@v1"]
    )
    assert code == 0, text
    assert "Fetching" in text or "%|" in text, text
    assert "pulled hf://org/ad@v1" in text


def _run_on_tty(argv: list[str], timeout: float = 120) -> tuple[int, str]:
    master, slave = pty.openpty()
    # a 0x0 terminal gets no bars
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
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
    assert tags == {
        "zeta": ids["zeta"],
        "alpha": ids["alpha"],
        "also-alpha": ids["alpha"],
        "release-3": ids["release/3"],
    }
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
    members = {(m["role"], m["label"]): m["commit_id"] for m in d["members"]}
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
        assert m.provenance == {
            "source": "hf",
            "repo": "org/macaron",
            "revision": "v1",
            "sha": sha,
            "path": path,
        }
        assert m.line == path
    src = {"router": "a1", "chat": "a2", "coding": "a3"}
    for path, cid in by_path.items():
        blob = api.show(repo, cid).files["adapter_model.safetensors"].sha256
        assert (
            repo.store.local_path(blob).read_bytes()
            == (models[src[path]] / "adapter_model.safetensors").read_bytes()
        )

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
        scratch, _ = api.init(tmp_path / "scratch")
        api.base_add(scratch, "tiny-llama", models["base"])
        online = api.HubSettings.from_env({"HF_HOME": str(hf_home), "HF_ENDPOINT": own.endpoint})
        assert api.pull(scratch, "hf://org/off@v1", settings=online, by="tester").pulled[0].created
        scratch.close()
        endpoint = own.endpoint
    # the server is stopped now
    env = {**_clean_env(), "HF_HOME": str(hf_home), "HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "1"}
    ok = _mint_subprocess(repo, env, "pull", "hf://org/off@v1", "--json")
    assert ok.returncode == 0, ok.stderr
    [item] = json.loads(ok.stdout)["pulled"]
    assert item["created"] and item["sha"] == sha
    assert api.show(repo, "off").provenance == {
        "source": "hf",
        "repo": "org/off",
        "revision": "v1",
        "sha": sha,
    }
    by_sha = _mint_subprocess(repo, env, "pull", f"hf://org/off@{sha}")
    assert by_sha.returncode == 0 and "already in the store" in by_sha.stdout, by_sha.stderr

    before = snapshot(repo)
    cold = _mint_subprocess(
        repo,
        {**env, "HF_HOME": str(tmp_path / "empty")},
        "pull",
        "hf://org/off@v1",
        "--as",
        "cold",
    )
    assert cold.returncode != 0
    [line] = cold.stderr.strip().splitlines()
    assert "needs the network" in line
    assert snapshot(repo) == before


def _clean_env() -> dict:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))
    }


def _mint_subprocess(repo, env, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mint", "--repo", str(repo.root), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


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
        ("hf://org/ad@v1", ["--as", "bad/li/ne"], "invalid line name"),
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
    one_line_error(based("pull", "hf://org/ad@v1", "--all-tags"), "every tag of org/ad")
    assert based("pull", "hf://org/ad", "--all-tags", "--tag", "x").code != 0


# --- library pieces --------------------------------------------------------------


def test_settings_are_read_when_asked(tmp_path):
    s = api.HubSettings.from_env(
        {"HF_HOME": str(tmp_path), "HF_ENDPOINT": "http://h:1/", "HF_HUB_OFFLINE": "yes"}
    )
    assert (s.endpoint, s.cache_dir) == ("http://h:1", str(tmp_path / "hub"))
    assert s.offline and s.token is None
    (tmp_path / "token").write_text("hf_abc\n")
    assert api.HubSettings.from_env({"HF_HOME": str(tmp_path)}).token == "hf_abc"
    assert api.HubSettings.from_env({"HF_HOME": str(tmp_path), "HF_TOKEN": "t"}).token == "t"


def test_uris_and_tag_names():
    assert parse_uri("hf://org/x@v1") == HubUri("org/x", "v1")
    assert parse_uri("hf://org/x") == HubUri("org/x", None)
    assert parse_uri("hf://org/x@refs/pr/1") == HubUri("org/x", "refs/pr/1")
    assert parse_uri("hf://x@production") == HubUri("x", "production")  # a name alone, as gpt2
    revisions = ("@../../etc", "@v1/../../x", "@/abs", "@a\nb", "@a b", "@a\\b", "@x/")
    bad_uris = ["org/x", "hf://a/b/c", "hf://org/x@", "hf://org/../x", "hf://..", "hf://"]
    for bad in bad_uris + ["hf://org/x" + r for r in revisions]:
        with pytest.raises(InvalidHubUri):
            parse_uri(bad)
    assert mint_tag_name("release/2") == "release-2"
    assert mint_tag_name("v1.0") == "v1.0"


# --- a hostile hub: nothing outside the repository and the HF cache -------------


def _files(models, name: str, folder: str = "") -> dict[str, bytes]:
    prefix = f"{folder}/" if folder else ""
    return {prefix + p.name: p.read_bytes() for p in sorted(models[name].iterdir()) if p.is_file()}


def _set_files(models, router_at: str = "router", **mol) -> dict[str, bytes]:
    prompt = mol.get("prompt", "route.md")
    return {
        "mol.toml": _mol(**mol).encode(),
        prompt if "evil" not in prompt else "route.md": b"Route the request.\n",
        "summary.md": b"Summarise.\n",
        **_files(models, "a1", router_at),
        **_files(models, "a2", "chat"),
        **_files(models, "a3", "coding"),
    }


# (what the hub says, the error line); OUT is a folder outside the repository and the cache
HOSTILE = {
    "listing ../": (dict(listed=["../../evil.md"]), "unsafe file path"),
    "listing absolute": (dict(listed=["{OUT}/evil.md"]), "unsafe file path"),
    "listing backslash": (dict(listed=["..\\..\\evil.md"]), "unsafe file path"),
    "listing control": (dict(listed=["evil\x1b[2J.md", "evil\n.md"]), "unsafe file path"),
    "listing folder ..": (
        dict(listed=["chat/../../evil/adapter_config.json"]),
        "unsafe file path",
    ),
    "prompt ../": (dict(mol=dict(prompt="../../evil.md")), "must be a relative path"),
    "prompt absolute": (dict(mol=dict(prompt="{OUT}/evil.md")), "must be a relative path"),
    "prompt backslash": (dict(mol=dict(prompt="..\\evil.md")), "must be a relative path"),
    "member ../": (dict(mol=dict(router="../evil")), "unsafe file path"),
    "member absolute": (dict(mol=dict(router="{OUT}/evil")), "unsafe file path"),
    "member backslash": (dict(mol=dict(router="router\\..\\..\\evil")), "unsafe file path"),
    "member control": (dict(mol=dict(router="evil\u0000")), "unsafe file path"),
    "prompt on a member file": (dict(mol=dict(prompt="router/README.md")), "collides"),
    "prompt on a hub folder": (
        dict(mol=dict(router="experts/router", prompt="experts"), router_at="experts/router"),
        "both a file and a folder",
    ),
    "commit sha is a path": (dict(sha="../../../evil"), "as the commit of"),
    "etag is a path": (
        dict(etags={"adapter_config.json": "../../../../evil"}),
        "unsafe file path",
    ),
}


@pytest.mark.parametrize("case", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_hub_cannot_reach_outside(based, repo, models, tmp_path, monkeypatch, case):
    answers, expect = case
    out = tmp_path.parent
    answers = json.loads(json.dumps(answers).replace("{OUT}", str(out)))
    mol, router_at = answers.pop("mol", None), answers.pop("router_at", "router")
    files = _set_files(models, router_at, **mol) if mol is not None else _files(models, "a1")
    if "listed" in answers and "chat/" in answers["listed"][0]:
        files = _set_files(models)
    before, outside = snapshot(repo), _tree(out, but=tmp_path)
    evil = set(out.rglob("*evil*"))  # other tests of this worker may name their files so
    with StubHub("org/hostile", files, **answers) as stub:
        monkeypatch.setenv("HF_ENDPOINT", stub.endpoint)
        one_line_error(based("pull", "hf://org/hostile@v1"), expect)
    assert snapshot(repo) == before
    assert _tree(out, but=tmp_path) == outside  # nothing made outside this test's folder
    assert set(out.rglob("*evil*")) == evil  # no evil file, in this test's folder either
    assert not [r for r in stub.requests if "evil" in r]  # never even asked for
    assert not [p for p in _regular_files(tmp_path) if p.stat().st_nlink > 1]  # no link left


def _tree(root: Path, but: Path) -> set[str]:
    found = set()
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if Path(folder, d) != but]
        found.update(os.path.join(folder, name) for name in dirs + files)
    return found


def _regular_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]


@pytest.mark.parametrize("links", [True, False], ids=["hard link", "copy"])
def test_staging_makes_new_files_and_never_writes_over_one(tmp_path, monkeypatch, links):
    from mint.hf.client import HubClient
    from mint.hf.plan import stage

    if not links:  # another file system: os.link fails, and the file is copied
        monkeypatch.setattr(os, "link", _no_links)
    snapshot = tmp_path / "cache" / "snapshot"
    (snapshot / "sub").mkdir(parents=True)
    (snapshot / "sub" / "a.md").write_text("from the hub\n")
    hub = HubClient("org/x", api.HubSettings(cache_dir=str(tmp_path / "cache")))
    staged = stage(hub, snapshot, ["sub/a.md"], tmp_path / "one")
    assert (staged / "sub" / "a.md").read_text() == "from the hub\n"
    assert ((staged / "sub" / "a.md").stat().st_nlink == 2) == links

    (tmp_path / "two" / "sub").mkdir(parents=True)
    (tmp_path / "two" / "sub" / "a.md").write_text("mine\n")
    with pytest.raises(InvalidConfig, match="written twice"):
        stage(hub, snapshot, ["sub/a.md"], tmp_path / "two")
    assert (tmp_path / "two" / "sub" / "a.md").read_text() == "mine\n"
    assert (snapshot / "sub" / "a.md").read_text() == "from the hub\n"


def _no_links(src, dst, **kwargs):
    raise OSError(18, "Invalid cross-device link")


def test_a_set_is_checked_whole_before_any_member_is_committed(based, repo, models, monkeypatch):
    files = _set_files(
        models, base="no-such-base"
    )  # the set's base: the last thing set_commit reads
    before = snapshot(repo)
    with StubHub("org/unbased", files) as stub:
        monkeypatch.setenv("HF_ENDPOINT", stub.endpoint)
        one_line_error(based("pull", "hf://org/unbased@v1"), "no-such-base")
    assert snapshot(repo) == before


def test_a_set_pull_that_fails_late_takes_its_member_commits_back(
    repo, models, hf_env, monkeypatch
):
    import mint.porcelain.pull as pulling

    api.base_add(repo, "tiny-llama", models["base"])
    older = api.commit(repo, "chat", models["a3"], "an older chat", author="tester")
    before = snapshot(repo)
    set_commit = pulling.set_commit

    def another_writer_wins(*args, **kwargs):
        raise RefConflict("line macaron", None, "f" * 64)

    monkeypatch.setattr(pulling, "set_commit", another_writer_wins)
    with pytest.raises(RefConflict):
        api.pull(repo, "hf://org/macaron@v1", by="tester")
    assert snapshot(repo)[1] == before[1]  # every row as it was (new blobs are left to gc)
    assert api.resolve(repo, "chat") == older.id

    monkeypatch.setattr(pulling, "set_commit", set_commit)
    [item] = api.pull(repo, "hf://org/macaron@v1", by="tester").pulled
    assert item.created and all(m.created for m in item.members)
    assert api.show(repo, "chat").parents == [older.id]


# --- credentials in HF_ENDPOINT ---------------------------------------------------


def test_credentials_in_the_endpoint_are_never_shown(based, repo, hubsrv, monkeypatch):
    closed = closed_port_endpoint().replace("http://", "http://user:secret@") + "/"
    monkeypatch.setenv("HF_ENDPOINT", closed)
    line = one_line_error(based("pull", "hf://org/ad@v1"), "cannot reach the hub")
    assert "secret" not in line and "http://***@127.0.0.1:" in line
    settings = api.HubSettings.from_env()
    assert "secret" not in repr(settings) and "secret" not in settings.shown_endpoint
    said = settings.scrub(f"GET {settings.endpoint}api failed: user:secret@127.0.0.1 (secret)")
    assert "secret" not in said and "user" not in said

    with_user = hubsrv.endpoint.replace("http://", "http://user:secret@")
    monkeypatch.setenv("HF_ENDPOINT", with_user)
    missing = one_line_error(based("pull", "hf://org/nope"), "no hub repo org/nope")
    assert "secret" not in missing
    r = based("pull", "hf://org/ad@v1", "--json")
    assert r.code == 0, r
    assert "secret" not in r.out + r.err
    assert r.json()["endpoint"] == hubsrv.endpoint.replace("http://", "http://***@")


def hub_sha(hubsrv, repo_id: str, rev: str) -> str:
    org, name = repo_id.split("/")
    return subprocess.run(
        ["git", "rev-parse", rev],
        cwd=hubsrv.mirrors / "models" / org / name,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


@pytest.mark.parametrize(
    "point", ["commit.after-blobs", "commit.in-transaction", "commit.after-transaction"]
)
def test_a_set_pull_killed_at_each_commit_step_leaves_whole_commits(based, repo, point):
    """kill -9 inside the first member's commit: fsck is clean, every ref names a whole
    commit, and pulling again completes the set."""
    env = {**os.environ, "MINT_CRASH_AT": point, "MINT_USER": "puller"}
    killed = _mint_subprocess(repo, env, "pull", "hf://org/macaron@v1")
    assert killed.returncode == -9, killed.stderr
    assert_whole(repo)
    assert "macaron" not in {line.name for line in api.ls(repo)}
    again = based("pull", "hf://org/macaron@v1")
    assert again.code == 0, again
    assert_whole(repo)
    assert api.show(repo, "macaron").kind == "set"
