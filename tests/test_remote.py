"""mint against a registry: `--repo URL`, remotes, push, fetch, clone and login, with real
`mint registry serve` processes and the real CLI as the client."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time

import httpx
import pytest
import sqlalchemy as sa

from mint import api
from mint import errors as e
from mint import schema as s
from mint.cli import run_in_process
from mint.exchange import arriving, sending, wire
from mint.jsonable import to_jsonable
from mint.remote import transfer_client
from mint.remote.blobs import Progress
from mint.remote.config import save_token, token_for
from mint.remote.fetch_client import clone
from mint.remote.http import Client
from mint.remote.repo import RemoteRepo
from mint.remote.transfer_client import push

from conftest import Result, one_line_error
from support import free_port
from support.registry import create_token, start_registry
from support.texts import PROD_TWO_APPROVALS

MOL = """
name = "macaron"
base = "tiny-llama"
[router]
adapter = "router@v1"
labels = ["chat", "coding"]
prompt = "route.md"
[experts]
chat = "chat"
coding = "coding"
[summary]
adapter = "chat"
prompt = "summary.md"
"""

ROLES = {
    "wanda": "writer",
    "max": "maintainer",
    "mia": "maintainer",
    "ada": "admin",
    "rita": "reader",
}


class Team:
    """A registry over a repository, with a token per person; runs the CLI as any of them."""

    def __init__(self, repo, monkeypatch, tmp_path, base):
        self.repo, self.tmp, self.base = repo, tmp_path, base
        self.tokens = {n: create_token(repo.root, n, role) for n, role in ROLES.items()}
        self._env = monkeypatch
        self.servers = [start_registry(repo.root)]
        self.url = self.servers[0].url

    def mint(self, who: str | None, *args) -> Result:
        """`mint ARGS...` with WHO's token (None: no token at all)."""
        if who is None:
            self._env.delenv("MINT_TOKEN", raising=False)
        else:
            self._env.setenv("MINT_TOKEN", self.tokens[who])
        return Result(*run_in_process([str(a) for a in args]))

    def at(self, who: str, *args) -> Result:
        """`mint --repo URL ARGS...` as WHO."""
        return self.mint(who, "--repo", self.url, *args)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


@pytest.fixture
def team(repo, models, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("MINT_USER", "laptop-user")
    api.base_add(repo, "tiny-llama", models["base"])
    code, _, err = run_in_process(["--repo", str(repo.root), "registry", "protect", "production"])
    assert code == 0, err
    t = Team(repo, monkeypatch, tmp_path, models["base"])
    yield t
    t.stop()


@pytest.fixture
def sqlite_team(models, monkeypatch, tmp_path):
    """A registry on SQLite only, for the tests that are about the client, not the database."""
    repo, _ = api.init(tmp_path / "registry")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("MINT_USER", "laptop-user")
    api.base_add(repo, "tiny-llama", models["base"])
    t = Team(repo, monkeypatch, tmp_path, models["base"])
    yield t
    t.stop()
    repo.close()


def local_repo(team: Team, name: str, who: str = "wanda"):
    """A clone of the team's registry at tmp/NAME, opened, with the base registered."""
    assert team.mint(who, "clone", team.url, team.tmp / name).code == 0
    r = api.open_repo(team.tmp / name)
    api.base_add(r, "tiny-llama", team.base)
    return r


def variant(models, tmp_path, i: int):
    """A copy of adapter a2 whose README differs: another commit of the same shape."""
    dest = tmp_path / f"variant{i}"
    shutil.copytree(models["a2"], dest)
    (dest / "README.md").write_text(f"variant {i}\n")
    return dest


def everything(repo) -> dict:
    """Every commit (as `show` gives it), blob, tag and evaluation of a repository."""
    with repo.db.read() as conn:
        ids = [r[0] for r in conn.execute(sa.select(s.commits.c.id))]
        evaluations = sending.export_objects(conn, ids)["evaluations"]
    return {
        "commits": {cid: api.show(repo, cid) for cid in ids},
        "blobs": {b: repo.store.local_path(b).read_bytes() for b in repo.store.iter()},
        "tags": {(t.line, t.name, t.target, t.message) for t in api.tag_list(repo)},
        "evaluations": sorted(evaluations, key=lambda x: (x["commit"], x["at"])),
        "heads": {i.name: i.head for i in api.ls(repo)},
    }


# --- the acceptance story -------------------------------------------------------------------


def test_team_story_writer_maintainers_reader(team, models, tmp_path):
    t = team
    (tmp_path / "prod.toml").write_text(PROD_TWO_APPROVALS)
    one_line_error(t.at("wanda", "contract", "add", tmp_path / "prod.toml"), "admin")
    assert t.at("ada", "contract", "add", tmp_path / "prod.toml").code == 0
    # The writer works on a laptop: a clone, a commit, an evaluation, then a push.
    work = local_repo(t, "work")
    local = ["--repo", work.root]
    assert t.mint("wanda", *local, "contract", "add", tmp_path / "prod.toml").code == 0
    cid = t.mint("wanda", *local, "commit", "chat", models["a1"], "-m", "one", "--json").json()[
        "id"
    ]
    assert (
        t.mint("wanda", *local, "eval", "chat", "--contract", "prod", "--metric", "acc=0.9").code
        == 0
    )
    assert t.mint("wanda", *local, "push", t.url, "chat").code == 0
    gate = t.at("wanda", "gate", "chat", "--to", "production", "--json")
    assert gate.code == 3 and gate.json()["evaluations"], gate
    checks = {c["check"]: c for c in gate.json()["checks"]}
    assert checks["acc"]["ok"] and checks["approvals"]["found"] == "0"
    # The writer may neither promote to protected production nor approve for it.
    one_line_error(t.at("wanda", "promote", "chat", "--to", "production"), "maintainer")
    one_line_error(t.at("wanda", "approve", "chat", "--channel", "production"), "maintainer")
    assert t.at("max", "gate", "chat", "--to", "production").code == 3
    for who in ("max", "mia"):
        assert t.at(who, "approve", "chat", "--channel", "production").code == 0
    moved = t.at("max", "promote", "chat", "--to", "production", "--json")
    assert moved.code == 0 and moved.json()["to"] == cid, moved
    history = t.at("rita", "history", "chat@production", "--json").json()
    assert [(m["by"], m["to"]) for m in history] == [("max", cid)]
    assert api.show(t.repo, cid).author == "laptop-user"  # the commit keeps its author
    # A reader fetches and checks out, and cannot push.
    seen = local_repo(t, "reader", who="rita")
    out = tmp_path / "prod-checkout"
    assert t.at("rita", "checkout", "chat@production", out).code == 0
    for f in models["a1"].iterdir():
        assert (out / f.name).read_bytes() == f.read_bytes()
    assert t.mint("rita", "--repo", seen.root, "commit", "chat", models["a2"], "-m", "x").code == 0
    one_line_error(t.mint("rita", "--repo", seen.root, "push", "origin", "chat"), "writer")
    assert api.resolve(t.repo, "chat") == cid
    work.close(), seen.close()


def test_approving_what_one_made_oneself_does_not_count(sqlite_team, models):
    t = sqlite_team
    assert t.mint(None, "--repo", t.repo.root, "registry", "protect", "production").code == 0
    (t.tmp / "prod.toml").write_text(PROD_TWO_APPROVALS)
    assert t.at("ada", "contract", "add", t.tmp / "prod.toml").code == 0
    assert t.at("max", "commit", "chat", models["a2"], "-m", "max's").code == 0
    assert t.at("max", "approve", "chat", "--channel", "production").code == 0
    gate = t.at("max", "gate", "chat", "--to", "production", "--json").json()
    assert {c["check"]: c["found"] for c in gate["checks"]}["approvals"] == "0"


# --- push, fetch and clone --------------------------------------------------------------------


def test_push_fetch_clone_round_trip_every_byte_id_tag_and_evaluation(
    team, models, tmp_path, monkeypatch
):
    t = team
    monkeypatch.setattr(transfer_client, "OBJECTS_BATCH", 1)  # a request per commit object
    (tmp_path / "prod.toml").write_text(PROD_TWO_APPROVALS)
    assert t.at("ada", "contract", "add", tmp_path / "prod.toml").code == 0
    a, _ = api.init(tmp_path / "a")
    api.base_add(a, "tiny-llama", models["base"])
    api.contract_add(a, tmp_path / "prod.toml", by="ann")
    for line, key in (("router", "a1"), ("chat", "a1"), ("chat", "a2"), ("coding", "a3")):
        api.commit(a, line, models[key], f"{line} {key}", author="ann", meta={"k": key})
    api.tag(a, "v1", "router", by="ann", message="first router")
    api.tag(a, "v0", "chat~1", by="ann")
    api.record_evaluation(a, "chat", "prod", {"acc": 0.7}, source="manual", by="ann")
    api.record_evaluation(a, "chat~1", "prod", {"acc": 0.6}, source="manual", by="bob")
    folder = tmp_path / "macaron"
    folder.mkdir()
    (folder / "mol.toml").write_text(MOL)
    (folder / "route.md").write_text("Route.\n")
    (folder / "summary.md").write_text("Summarise.\n")
    api.set_commit(a, folder / "mol.toml", "a set", author="ann")
    lines = ["router", "chat", "coding", "macaron"]
    assert t.mint("wanda", "--repo", a.root, "remote", "add", "origin", t.url).code == 0
    pushed = t.mint("wanda", "--repo", a.root, "push", "origin", *lines, "--tags", "--json")
    assert pushed.code == 0, pushed
    assert pushed.json()["commits"] == 5 and sorted(pushed.json()["tags"]) == [
        "chat@v0",
        "router@v1",
    ]
    again = t.mint("wanda", "--repo", a.root, "push", "origin", *lines, "--tags", "--json").json()
    assert (again["commits"], again["blobs"], again["bytes"]) == (0, 0, 0)  # nothing re-sent
    b = local_repo(t, "b", who="rita")
    assert everything(b) == everything(a)
    # The set checks out from the registry exactly as it does here.
    here, there = tmp_path / "here", tmp_path / "there"
    api.checkout(a, "macaron", here)
    assert t.at("rita", "checkout", "macaron", there).code == 0
    files = sorted(p.relative_to(here) for p in here.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(there) for p in there.rglob("*") if p.is_file())
    assert all((here / f).read_bytes() == (there / f).read_bytes() for f in files)
    # New work fast-forwards a fetching repository; its channels are reported, not fetched.
    api.commit(a, "chat", models["a3"], "three", author="ann")
    assert t.mint("wanda", "--repo", a.root, "push", "origin", "chat").code == 0
    assert t.at("max", "promote", "chat", "--to", "staging").code == 0
    got = t.mint("rita", "--repo", b.root, "fetch", "origin", "chat", "--json").json()
    assert got["lines"][0]["state"] == "fast-forward" and got["blobs"] == 0
    assert got["lines"][0]["channels"] == {"staging": api.resolve(a, "chat")}
    assert everything(b) == everything(a) and api.status(b)[0].channels == {}
    a.close(), b.close()


def test_non_fast_forward_push_is_refused_naming_both_heads(sqlite_team, models):
    t = sqlite_team
    one, two = local_repo(t, "one"), local_repo(t, "two")
    api.commit(one, "chat", models["a1"], "base", author="x")
    assert t.mint("wanda", "--repo", one.root, "push", "origin", "chat").code == 0
    assert t.mint("wanda", "--repo", two.root, "fetch", "origin").code == 0
    theirs = api.commit(one, "chat", models["a2"], "theirs", author="x").id
    ours = api.commit(two, "chat", models["a3"], "ours", author="y").id
    assert t.mint("wanda", "--repo", one.root, "push", "origin", "chat").code == 0
    line = one_line_error(t.mint("wanda", "--repo", two.root, "push", "origin", "chat"), "fetch")
    assert theirs[:12] in line and ours[:12] in line
    fetched = t.mint("wanda", "--repo", two.root, "fetch", "origin", "chat")
    assert fetched.code == 0 and "diverged" in fetched.out
    assert theirs[:12] in fetched.out and ours[:12] in fetched.out
    assert api.resolve(two, "chat") == ours  # left alone
    line = one_line_error(t.mint("wanda", "--repo", two.root, "push", "origin", "chat", "--force"))
    assert "maintainer" in line and api.resolve(t.repo, "chat") == theirs
    assert t.mint("max", "--repo", two.root, "push", "origin", "chat", "--force").code == 0
    assert api.resolve(t.repo, "chat") == ours
    one.close(), two.close()


def test_tag_at_another_commit_is_refused_in_one_line(sqlite_team, models):
    t = sqlite_team
    one = local_repo(t, "one")
    api.commit(one, "chat", models["a1"], "a1", author="x")
    second = api.commit(one, "chat", models["a2"], "a2", author="x").id
    api.tag(one, "v1", "chat", by="x")
    assert t.mint("wanda", "--repo", one.root, "push", "origin", "chat@v1").code == 0
    assert {x.name: x.target for x in api.tag_list(t.repo)} == {"v1": second}
    api.tag(one, "v1", "chat~1", by="x", force=True)
    line = one_line_error(t.mint("wanda", "--repo", one.root, "push", "origin", "chat", "--tags"))
    assert "chat@v1" in line and second[:12] in line and "never moves" in line
    assert api.tag_list(t.repo)[0].target == second
    # Fetch never moves a local tag either: it reports the conflict.
    fetched = t.mint("wanda", "--repo", one.root, "fetch", "origin")
    one_line_error(fetched, "left alone")
    assert api.tag_list(one)[0].target != second
    one.close()


class _KillAfterFirstBlob(Progress):
    """Kills the registry once the first blob of the pack is sent and stored there: a pack
    cut short keeps the blobs that arrived whole."""

    def __init__(self, server, store):
        self.server, self.store, self.sent = server, store, []

    def blob_done(self, blob_id: str) -> None:
        self.sent.append(blob_id)
        if len(self.sent) == 1:
            deadline = time.monotonic() + 15
            while not self.store.has(blob_id) and time.monotonic() < deadline:
                time.sleep(0.05)
            os.kill(self.server.pid, signal.SIGKILL)
            self.server._process.wait()


def test_server_going_away_mid_push_then_a_retry_completes(sqlite_team, models):
    t = sqlite_team
    one = local_repo(t, "one")
    cid = api.commit(one, "chat", models["a1"], "a1", author="x").id
    blobs = len(api.show(one, cid).files)
    assert blobs >= 2
    hook = _KillAfterFirstBlob(t.servers[0], t.repo.store)
    with pytest.raises(e.RegistryUnreachable, match="push stopped"):
        push(one, RemoteRepo(t.url, t.tokens["wanda"]), ["chat"], progress=hook)
    assert hook.sent and api.ls(t.repo) == []
    t.servers[0] = start_registry(t.repo.root)  # back, on another port
    done = push(one, RemoteRepo(t.servers[0].url, t.tokens["wanda"]), ["chat"])
    assert done.blobs == blobs - 1 and done.lines[0].moved
    assert api.resolve(t.repo, "chat") == cid and api.fsck(t.repo).ok
    one.close()


def test_eight_clients_push_one_line_at_once(team, models, tmp_path):
    t = team
    t.servers.append(start_registry(t.repo.root))  # two replicas over one database and store
    seed = local_repo(t, "seed")
    base = api.commit(seed, "chat", models["a1"], "seed", author="s").id
    assert push(seed, RemoteRepo(t.url, t.tokens["wanda"]), ["chat"]).lines[0].moved
    clients, mine = [], {}
    for i in range(8):
        root = tmp_path / f"c{i}"
        clone(t.servers[i % 2].url, root, token=t.tokens["wanda"], by="c")
        r = api.open_repo(root)
        mine[i] = api.commit(r, "chat", variant(models, tmp_path, i), f"c{i}", author=f"c{i}").id
        r.close()
        clients.append(root)
    env = {**os.environ, "MINT_TOKEN": t.tokens["wanda"]}
    cmd = [sys.executable, "-m", "mint", "--repo"]
    procs = [
        subprocess.Popen(
            [*cmd, str(c), "push", "origin", "chat"],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for c in clients
    ]
    results = [Result(p.wait(120), p.stdout.read(), p.stderr.read()) for p in procs]
    winners = [i for i, r in enumerate(results) if r.code == 0]
    assert len(winners) == 1, results
    for r in results:
        if r.code != 0:
            one_line_error(r, "fetch, then push again")
    assert api.resolve(t.repo, "chat") == mine[winners[0]]
    with t.repo.db.read() as conn:
        h = s.ref_history.c
        q = sa.select(h.old, h.new).where(h.line == "chat", h.name == "HEAD").order_by(h.id)
        moves = [tuple(x) for x in conn.execute(q)]
    assert moves == [(None, base), (base, mine[winners[0]])]  # no lost or extra update
    seed.close()


# --- commands against a URL -------------------------------------------------------------------


EVALUATOR = """
name = "files"
channel = "staging"
[[metric]]
name = "n"
min = 2
[evaluator]
command = ["{python}", "-c", "import json,os,sys; print(json.dumps({{'n': len(os.listdir(sys.argv[1]))}}))", "{{checkout}}"]
"""  # noqa: E501


def test_every_command_against_a_url(sqlite_team, models, tmp_path):
    t = sqlite_team
    at = t.at
    c1 = at("wanda", "commit", "chat", models["a1"], "-m", "one", "--json").json()
    assert (
        c1["created"]
        and not at("wanda", "commit", "chat", models["a1"], "-m", "x", "--json").json()["created"]
    )
    c2 = at("wanda", "commit", "chat", models["a2"], "-m", "two", "--meta", "lr=1e-4").out.strip()
    assert api.show(t.repo, c2).author == "wanda" and api.show(t.repo, c2).meta == {"lr": "1e-4"}
    assert [c["id"] for c in at("rita", "log", "chat", "--json").json()] == [c2, c1["id"]]
    shown = to_jsonable(api.show(t.repo, c1["id"]))
    assert at("rita", "show", "chat~1", "--json").json() == json.loads(json.dumps(shown))
    assert not at("rita", "diff", "chat~1", "chat", "--json").json()["empty"]
    assert at("rita", "ls", "--json").json()[0]["head"] == c2
    assert at("wanda", "commit", "router", models["a3"], "-m", "r").code == 0
    assert at("wanda", "tag", "v1", "router", "-m", "first").code == 0
    assert [x["name"] for x in at("rita", "tag", "--list", "--json").json()] == ["v1"]
    folder = tmp_path / "macaron"
    folder.mkdir()
    (folder / "mol.toml").write_text(MOL.replace('coding = "coding"', 'coding = "chat~1"'))
    (folder / "route.md").write_text("Route.\n")
    (folder / "summary.md").write_text("Summarise.\n")
    sid = at("wanda", "set", "commit", folder / "mol.toml", "-m", "s", "--json").json()["id"]
    assert "nothing to commit" in at("wanda", "set", "commit", folder / "mol.toml").out
    assert [m.commit_id for m in api.show(t.repo, sid).members][1:] == [c2, c1["id"], c2]
    out = at("rita", "export", "macaron", tmp_path / "vllm", "--format", "vllm", "--json").json()
    assert sorted(out["adapters"]) == ["chat", "coding", "router", "summary"]
    assert (tmp_path / "vllm" / "router.json").exists()
    # What the runtime serves (`serve`, `route-eval`): the set with its blobs cached here.
    spec = api.set_spec(RemoteRepo(t.url, t.tokens["rita"], cache=tmp_path / "cache"), sid)
    same = api.set_spec(t.repo, sid)
    assert (spec.blobs, spec.route_prompt, spec.labels) == (
        same.blobs,
        same.route_prompt,
        same.labels,
    )
    for mine, theirs in (
        (spec.router, same.router),
        (spec.experts["coding"], same.experts["coding"]),
    ):
        assert (mine.commit_id, mine.config, mine.blobs) == (
            theirs.commit_id,
            theirs.config,
            theirs.blobs,
        )
        assert open(mine.weights, "rb").read() == open(theirs.weights, "rb").read()
    (tmp_path / "files.toml").write_text(EVALUATOR.format(python=sys.executable))
    assert at("ada", "contract", "add", tmp_path / "files.toml").code == 0
    assert at("rita", "contract", "show", "files", "--json").json()["version"] == 1
    assert [c["name"] for c in at("rita", "contract", "ls", "--json").json()] == ["files"]
    ev = at("wanda", "eval", "chat", "--contract", "files", "--json").json()
    assert ev["metrics"] == {"n": 3.0} and ev["by"] == "wanda" and ev["checks"][0]["ok"]
    assert at("wanda", "promote", "chat", "--to", "staging").code == 0
    at("wanda", "eval", "chat~1", "--contract", "files", "--metric", "n=2")
    assert at("wanda", "promote", "chat~1", "--to", "staging").code == 0
    back = at("wanda", "rollback", "chat@staging", "--reason", "oops", "--json").json()
    assert back["to"] == c2 and back["by"] == "wanda"
    status = at("rita", "status", "--json").json()
    assert {x["name"]: x["channels"] for x in status}["chat"] == {"staging": c2}
    # pages, as locally: history -n/--before, status --limit/--after
    moves = at("rita", "history", "chat@staging", "--json").json()
    page = at("rita", "history", "chat@staging", "-n", "2", "--json").json()
    assert page == moves[-2:] and len(moves) == 3
    older = at("rita", "history", "chat@staging", "-n", "2", "--before", page[0]["id"], "--json")
    assert older.json() == moves[:1]
    paged = at("rita", "status", "--limit", "1", "--after", "chat", "--json").json()
    assert [x["name"] for x in paged] == ["macaron"]
    assert at("max", "tag", "-d", "router@v1").code == 0 and api.tag_list(t.repo) == []


def test_errors_from_a_registry_are_one_line(sqlite_team, models, tmp_path):
    t = sqlite_team
    one_line_error(t.at("rita", "show", "nosuch"), "unknown revision")
    one_line_error(t.at(None, "ls"), "token")
    one_line_error(t.at("rita", "commit", "chat", models["a1"], "-m", "x"), "writer")
    other = tmp_path / "other-base"
    other.mkdir()
    config = json.loads((models["base"] / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "rope_theta": 1234.0}))
    assert t.at("wanda", "base", "add", "other", other).code == 0
    one_line_error(t.at("wanda", "base", "add", "tiny-llama", other), "fingerprint")
    assert [b["name"] for b in t.at("rita", "base", "ls", "--json").json()] == [
        "other",
        "tiny-llama",
    ]
    for args in (["fsck"], ["gc"], ["db", "upgrade"]):
        one_line_error(t.at("rita", *args), "only where the repository is")
    one_line_error(t.mint("rita", "init", t.url), "only where the repository is")
    one_line_error(t.mint("rita", "--repo", t.url, "push", "origin", "chat"), "push")
    gone = f"http://127.0.0.1:{free_port()}"
    one_line_error(t.mint("rita", "--repo", gone, "ls"), "did not answer")
    assert t.at("wanda", "commit", "chat", models["a1"], "-m", "x").code == 0
    assert t.at("wanda", "promote", "chat", "--to", "production", "--force").code == 2


def test_login_keeps_the_token_for_its_owner_alone(sqlite_team, monkeypatch, tmp_path):
    t = sqlite_team
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    env.pop("MINT_TOKEN", None)
    login = [sys.executable, "-m", "mint", "login", t.url]
    bad = subprocess.run(login, input="nope\n", env=env, capture_output=True, text=True)
    one_line_error(Result(bad.returncode, bad.stdout, bad.stderr), "token")
    done = subprocess.run(
        login, input=t.tokens["rita"] + "\n", env=env, capture_output=True, text=True
    )
    assert done.returncode == 0 and "as rita (reader)" in done.stdout, done.stderr
    path = tmp_path / "config" / "mint" / "tokens.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert t.tokens["rita"] not in done.stdout + done.stderr
    assert t.mint(None, "--repo", t.url, "ls").code == 0  # the kept token
    monkeypatch.setenv("MINT_REPO", t.url + "/")
    assert t.mint(None, "status").code == 0


# --- the client's parts, without a server -------------------------------------------------------


def _answer(status: int, body) -> httpx.MockTransport:
    def handler(request):
        if isinstance(body, bytes):
            return httpx.Response(status, content=body)
        return httpx.Response(status, json=body)

    return httpx.MockTransport(handler)


@pytest.mark.parametrize(
    "status, body, kind, attrs",
    [
        (
            404,
            {"type": "RevisionNotFound", "message": "unknown revision: 'x'"},
            e.RevisionNotFound,
            {"rev": None},
        ),
        (
            409,
            {
                "type": "RefConflict",
                "message": "line chat moved",
                "detail": {"ref": "line chat", "expected": "a" * 64, "found": "b" * 64},
            },
            e.RefConflict,
            {"found": "b" * 64},
        ),
        (401, {"type": "Unauthenticated", "message": "no token"}, e.Unauthenticated, {}),
        (403, {"type": "NoSuchClass", "message": "no"}, e.Forbidden, {}),
        (418, {"type": "os", "message": "teapot"}, e.RegistryError, {"status": 418}),
        (502, b"<html>bad gateway</html>", e.RegistryError, {"status": 502}),
    ],
)
def test_error_answers_become_mint_errors(status, body, kind, attrs):
    client = Client(
        "http://registry.test",
        "t",
        transport=_answer(status, {"error": body} if isinstance(body, dict) else body),
    )
    with pytest.raises(kind) as info:
        client.get("/lines")
    assert type(info.value) is kind
    assert all(getattr(info.value, k) == v for k, v in attrs.items())
    if isinstance(body, dict) and kind is not e.RegistryError:
        assert str(info.value) == body["message"]


def test_a_gate_refusal_carries_its_report():
    check = {"check": "acc", "required": ">= 0.5", "found": "0.1", "ok": False}
    report = dict(
        commit_id="c" * 64,
        line="chat",
        channel="production",
        holder=None,
        contracts=["prod@v1"],
        evaluations=[],
        ok=False,
        checks=[check],
    )
    body = {"error": {"type": "GateRefused", "message": "gate refused", "detail": report}}
    client = Client("http://registry.test", "t", transport=_answer(409, body))
    with pytest.raises(e.GateRefused) as info:
        client.post("/promote", {})
    assert info.value.report.checks[0].found == "0.1" and not info.value.report.ok


def test_results_decode_back_into_their_dataclasses(tmp_path, models):
    from mint.objects import CommitDetail, Diff, Move

    repo, _ = api.init(tmp_path / "r")
    api.base_add(repo, "tiny-llama", models["base"])
    a = api.commit(repo, "chat", models["a1"], "one", author="x").id
    b = api.commit(repo, "chat", models["a3"], "two", author="x").id
    detail, d = api.show(repo, b), api.diff(repo, a, b)
    assert wire.decode(CommitDetail, json.loads(json.dumps(to_jsonable(detail)))) == detail
    assert wire.decode(Diff, json.loads(json.dumps(to_jsonable(d)))) == d
    move = Move(1, "t", "promote", "chat", "production", None, b, "x", None, None, [1])
    assert wire.decode(Move, to_jsonable(move)) == move
    with repo.db.read() as conn:
        sent = sending.commit_wire(conn, b)
    assert wire.commit_wire(arriving.new_commit(sent)) == sent
    repo.close()


def test_tokens_and_remotes_without_a_server(tmp_path):
    api.init(tmp_path / "r")[0].close()

    def mint(*args):
        return Result(*run_in_process(["--repo", str(tmp_path / "r"), *args]))

    config = tmp_path / "cfg" / "mint"
    save_token(config, "https://reg.example/", "tok-1")
    assert stat.S_IMODE((config / "tokens.json").stat().st_mode) == 0o600
    env = {"XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    assert token_for("https://reg.example", env) == "tok-1"
    assert token_for("https://reg.example/team", env) == "tok-1"
    assert token_for("https://other.example", env) is None
    assert token_for("https://reg.example", {**env, "MINT_TOKEN": "env"}) == "env"
    assert mint("remote", "add", "origin", "https://reg.example/").code == 0
    assert mint("remote", "add", "origin", "https://reg.example").code == 0  # same: no-op
    one_line_error(mint("remote", "add", "origin", "https://else.example"), "exists")
    one_line_error(mint("remote", "add", "up", "/some/folder"), "URL")
    assert mint("remote", "ls", "--json").json() == [
        {"name": "origin", "url": "https://reg.example"}
    ]
    one_line_error(mint("push", "nowhere", "chat"), "no remote named nowhere")
    assert mint("remote", "remove", "origin").code == 0 and mint("remote", "ls").out == ""


def test_help_loads_no_http_or_database_library():
    code = (
        "import sys; from mint.cli import run_in_process; run_in_process(['--help']);"
        "print([m for m in ('httpx', 'sqlalchemy', 'mint.remote') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_blob_download_is_verified_and_a_redirect_leaves_the_token_home(tmp_path):
    import hashlib

    data, seen = b"adapter bytes", []

    def handler(request):
        seen.append((request.url.host, request.headers.get("authorization")))
        if request.url.host == "registry.test":
            return httpx.Response(302, headers={"Location": "http://bucket.test/blob"})
        return httpx.Response(200, content=data)

    client = Client("http://registry.test", "tok", transport=httpx.MockTransport(handler))
    assert client.download(hashlib.sha256(data).hexdigest(), tmp_path / "good") == len(data)
    assert seen == [("registry.test", "Bearer tok"), ("bucket.test", None)]
    with pytest.raises(e.BlobCorrupt):
        client.download("0" * 64, tmp_path / "bad")
    assert not (tmp_path / "bad").exists() and (tmp_path / "good").read_bytes() == data
