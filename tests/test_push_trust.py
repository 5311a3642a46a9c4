"""The push path keeps the registry's promises (issue 19: items 1, 2, 3, 10 and 6's `1e400`).

`POST /api/v1/objects` is a second way for objects to enter the database: what arrives there
is checked as the local commands check it, inside one transaction. Every test runs a real
`mint registry serve`; what a user would do runs through the real CLI, and what only an
adversary sends (a contract version of `2.0`) is posted as raw JSON.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
import sqlalchemy as sa

from mint import api
from mint import schema as s
from mint.cli import run_in_process
from mint.exchange import sending
from mint.ids import utcnow

from conftest import DATABASES, Result, one_line_error, repo_on
from support.registry import create_token, error_of, start_registry
from support.texts import PROD_TWO_APPROVALS
from support.wire import recompute_id

# What a writer wanted in: production guarded by nothing (no approvals, no line it covers).
NO_GATE = 'name = "prod"\nchannel = "production"\nlines = ["nothing-matches"]\n'
OTHER_V1 = PROD_TWO_APPROVALS.replace("min = 0.5", "min = 0.1")  # another repository's prod v1

MOL = """
name = "coding-evil"
base = "tiny-llama"
[router]
adapter = "coding-router"
labels = ["chat", "coding"]
prompt = "route.md"
[experts]
chat = "secret"
coding = "coding-router"
[summary]
adapter = "secret"
prompt = "route.md"
"""


class World:
    """A registry (SQLite or PostgreSQL) with prod v1, a commit on `chat` and on `secret`,
    and tokens: ada (admin), wanda (writer), cody (writer limited to coding*)."""

    def __init__(self, repo, models, tmp_path, monkeypatch):
        self.repo, self.models, self.tmp = repo, models, tmp_path
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
        self._env = monkeypatch
        api.base_add(repo, "tiny-llama", models["base"])
        (tmp_path / "prod.toml").write_text(PROD_TWO_APPROVALS)
        api.contract_add(repo, tmp_path / "prod.toml", by="ada")
        self.chat = api.commit(repo, "chat", models["a1"], "chat one", author="ann").id
        self.secret = api.commit(repo, "secret", models["a2"], "secret", author="ann").id
        self.tokens = {
            "ada": create_token(repo.root, "ada", "admin"),
            "wanda": create_token(repo.root, "wanda", "writer"),
            "cody": create_token(repo.root, "cody", "writer", ("coding*",)),
        }
        self.server = start_registry(repo.root)
        self.url = self.server.url

    def post(self, who: str, payload: dict | str):
        """POST /api/v1/objects as WHO; a str is sent as it is (JSON that json.dumps would
        never write, such as 1e400)."""
        text = payload if isinstance(payload, str) else json.dumps(payload)
        with self.server.client(self.tokens[who]) as http:
            return http.post(
                "/api/v1/objects", content=text, headers={"Content-Type": "application/json"}
            )

    def get(self, who: str, path: str, **params):
        with self.server.client(self.tokens[who]) as http:
            return http.get(f"/api/v1{path}", params=params)

    def mint(self, who: str, *args) -> Result:
        self._env.setenv("MINT_TOKEN", self.tokens[who])
        return Result(*run_in_process([str(a) for a in args]))

    def contracts(self) -> list[tuple]:
        with self.repo.db.read() as conn:
            q = sa.select(s.contracts.c.name, s.contracts.c.version, s.contracts.c.id)
            return sorted(tuple(r) for r in conn.execute(q))

    def evaluations(self) -> int:
        with self.repo.db.read() as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(s.evaluations)).scalar()


@pytest.fixture
def world(repo, models, tmp_path, monkeypatch):
    w = World(repo, models, tmp_path, monkeypatch)
    yield w
    w.server.stop()


@pytest.fixture
def sqlite_world(models, tmp_path, monkeypatch):
    repo, _ = api.init(tmp_path / "registry")
    w = World(repo, models, tmp_path, monkeypatch)
    yield w
    w.server.stop()
    repo.close()


@pytest.fixture(scope="module", params=DATABASES)
def refusing(request, models, tmp_path_factory):
    """A world for the module's tests that only send what is refused (each checks that
    nothing of it is stored), one per database: they share its registry."""
    folder = tmp_path_factory.mktemp(f"refusing-{request.param}")
    with (
        repo_on(request, request.param, folder / "repo") as repo,
        pytest.MonkeyPatch.context() as env,
    ):
        w = World(repo, models, folder, env)
        yield w
        w.server.stop()


@pytest.fixture(scope="module")
def sqlite_refusing(models, tmp_path_factory):
    """The same on SQLite alone (a new repository, `mint init`'s own)."""
    folder = tmp_path_factory.mktemp("refusing")
    repo, _ = api.init(folder / "registry")
    with pytest.MonkeyPatch.context() as env:
        w = World(repo, models, folder, env)
        yield w
        w.server.stop()
    repo.close()


def evaluation(commit: str, *, version=1, toml=PROD_TWO_APPROVALS, metrics=None, **over) -> dict:
    """The wire form of one evaluation of COMMIT under prod vVERSION."""
    return {
        "commit": commit,
        "contract": {"name": "prod", "version": version, "source": toml},
        "metrics": {"acc": 0.9} if metrics is None else metrics,
        "source": "manual",
        "evaluator": None,
        "data_hash": None,
        "by": "ann",
        "at": utcnow().isoformat(),
        **over,
    }


# --- item 1: a contract version is a positive integer in every form it arrives in ----------


@pytest.mark.parametrize("version", ["2.0", '"2"', "true", "1e400", "-1", "0", "2147483648"])
def test_a_writer_cannot_add_a_contract_version_by_a_number_in_disguise(refusing, version):
    world = refusing
    before = world.contracts()
    marker = '"__VERSION__"'
    wire = evaluation(world.chat, version="__VERSION__", toml=NO_GATE, metrics={})
    payload = {"evaluations": [wire]}
    text = json.dumps(payload).replace(marker, version)
    for who in ("wanda", "ada"):  # not a matter of role: such a version is never one
        error = error_of(world.post(who, text), 422, "InvalidObject")
        assert "contract version" in error["message"]
    assert world.contracts() == before
    gate = world.get("wanda", "/gate", rev="chat", channel="production").json()
    assert gate["contracts"] == ["prod@v1"]


def test_only_an_admin_adds_a_contract_version_by_push(world):
    payload = {"evaluations": [evaluation(world.chat, version=2, toml=NO_GATE, metrics={})]}
    error_of(world.post("wanda", payload), 403, "Forbidden")
    assert [v for n, v, _ in world.contracts()] == [1]
    assert world.post("ada", payload).status_code == 200
    assert [v for n, v, _ in world.contracts()] == [1, 2]


# --- item 2 (push side): a set is a way to read its members ----------------------------------


def test_a_set_whose_member_lies_outside_the_token_is_refused_at_push(sqlite_world, tmp_path):
    w = sqlite_world
    work, _ = api.init(tmp_path / "work")  # a laptop that knows the secret commit's id
    assert w.mint("ada", "--repo", work.root, "fetch", w.url, "secret").code == 0
    api.base_add(work, "tiny-llama", w.models["base"])
    api.commit(work, "coding-router", w.models["a1"], "router", author="cody")
    folder = tmp_path / "evil"
    folder.mkdir()
    (folder / "mol.toml").write_text(MOL)
    (folder / "route.md").write_text("Route.\n")
    evil = api.set_commit(work, folder / "mol.toml", "reads secret", author="cody").id
    assert w.mint("cody", "--repo", work.root, "push", w.url, "coding-router").code == 0
    # The set alone, as the adversary sent it: its line is cody's, a member's is not.
    wire = commit_wire(work, evil)
    for blob, _size in wire["files"].values():
        with w.server.client(w.tokens["cody"]) as http, work.store.open(blob) as f:
            assert http.put(f"/api/v1/blobs/{blob}", content=f.read()).status_code in (200, 201)
    error = error_of(w.post("cody", {"commits": [wire]}), 403, "Forbidden")
    assert "secret" in error["message"]
    with w.repo.db.read() as conn:  # nothing of the push stayed: one transaction
        q = sa.select(s.commits.c.id).where(s.commits.c.id == evil)
        assert conn.execute(q).first() is None
    one_line_error(w.mint("cody", "--repo", work.root, "push", w.url, "coding-evil"), "secret")
    assert {i.name for i in api.ls(w.repo)} == {"chat", "secret", "coding-router"}
    # The same set from a token that may read every member's line goes in; its head is then
    # moved by a token that may read the members' lines, not by cody.
    assert w.post("wanda", {"commits": [wire]}).json()["stored"] == [evil]
    head = {"old": None, "new": evil}
    with w.server.client(w.tokens["cody"]) as http:
        error_of(http.post("/api/v1/lines/coding-evil/head", json=head), 403, "Forbidden")
    assert "coding-evil" not in {i.name for i in api.ls(w.repo)}
    assert w.mint("wanda", "--repo", work.root, "push", w.url, "coding-evil").code == 0
    assert api.resolve(w.repo, "coding-evil") == evil
    work.close()


# --- item 3: evaluations are checked as `mint eval` checks them ------------------------------


def bad_evaluations(w: World) -> list[tuple[dict, int, str, str]]:
    """(evaluation, status, error type, words in the message) of each kind of bad row."""
    unknown = "ab" * 32
    future = (utcnow() + dt.timedelta(days=400)).isoformat()
    return [
        (evaluation(w.chat, metrics={"acc": "high"}), 422, "EvaluationFailed", "not a number"),
        (evaluation(w.chat, metrics={"acc": [0.9]}), 422, "EvaluationFailed", "not a number"),
        (evaluation(w.chat, metrics={"acc": 0.9, "x": 1}), 422, "EvaluationFailed", "unknown"),
        (evaluation(w.chat, metrics={}), 422, "EvaluationFailed", "missing metric"),
        (evaluation(w.chat, source="oracle"), 422, "EvaluationFailed", "source"),
        (evaluation(unknown), 422, "MissingObjects", unknown[:12]),
        (evaluation(w.chat, at=future), 422, "InvalidObject", "future"),
        (evaluation(w.chat, at="yesterday"), 422, "InvalidObject", "ISO 8601"),
        (evaluation(w.chat, by=7), 422, "EvaluationFailed", "identity"),
        (evaluation(w.chat, evaluator="me"), 422, "EvaluationFailed", "evaluator"),
    ]


def test_evaluations_arriving_by_push_are_checked_as_mint_eval_checks_them(sqlite_world):
    w = sqlite_world
    for ev, status, kind, words in bad_evaluations(w):
        error = error_of(w.post("wanda", {"evaluations": [ev]}), status, kind)
        assert words.lower() in error["message"].lower(), (ev, error)
    infinite = json.dumps({"evaluations": [evaluation(w.chat, metrics={"acc": "__X__"})]})
    error_of(w.post("wanda", infinite.replace('"__X__"', "1e400")), 422, "EvaluationFailed")
    assert w.evaluations() == 0
    # A good one is stored: `by` is who ran it, `pushed_by` the token that brought it.
    assert w.post("wanda", {"evaluations": [evaluation(w.chat)]}).status_code == 200
    (stored,) = w.get("wanda", "/evaluations", rev="chat").json()
    assert (stored["by"], stored["pushed_by"], stored["metrics"]) == ("ann", "wanda", {"acc": 0.9})
    gate = w.get("wanda", "/gate", rev="chat", channel="production")
    assert gate.status_code == 200 and gate.json()["evaluations"]
    assert w.mint("ada", "--repo", w.repo.root, "fsck").code == 0


def test_fsck_reports_an_evaluation_that_mint_eval_would_not_have_recorded(sqlite_world):
    w = sqlite_world
    with w.repo.db.write() as conn:  # what a push stored before the push path checked it
        contract = conn.execute(sa.select(s.contracts.c.id)).scalar()
        row = dict(commit_id=w.chat, contract_id=contract, source="oracle", by="x", at=utcnow())
        conn.execute(s.evaluations.insert().values(metrics={"acc": "high"}, **row))
    found = w.mint("ada", "--repo", w.repo.root, "fsck")
    assert found.code == 1, found
    assert "evaluation 1 of " + w.chat[:12] in found.out and "not a number" in found.out


# --- item 10: a contract conflict says what it is ---------------------------------------------


def test_a_contract_whose_version_differs_on_the_registry_is_one_clear_line(
    sqlite_world, tmp_path
):
    w = sqlite_world
    here = w.contracts()
    other, _ = api.init(tmp_path / "other")  # a second repository, with its own prod v1
    api.base_add(other, "tiny-llama", w.models["base"])
    (tmp_path / "other.toml").write_text(OTHER_V1)
    ours = api.contract_add(other, tmp_path / "other.toml", by="bob").contract.id
    cid = api.commit(other, "coding", w.models["a3"], "coding", author="bob").id
    api.record_evaluation(other, "coding", "prod", {"acc": 0.9}, source="manual", by="bob")
    theirs = here[0][2]
    for who in ("wanda", "ada"):  # an admin gets the same: a recorded version never changes
        pushed = w.mint(who, "--repo", other.root, "push", w.url, "coding")
        line = one_line_error(pushed, "contract prod v1", code=1)
        assert ours[:12] in line and theirs[:12] in line, line
        assert "mint contract add" in line and "run the command again" not in line
    assert w.contracts() == here and w.evaluations() == 0
    with w.repo.db.read() as conn:
        assert conn.execute(sa.select(s.commits.c.id).where(s.commits.c.id == cid)).first() is None
    assert "coding" not in {i.name for i in api.ls(w.repo)}
    # The same rule on fetch: the registry's prod v1 is not this repository's.
    assert (
        w.mint(
            "ada", "--repo", w.url, "eval", "chat", "--contract", "prod", "--metric", "acc=0.9"
        ).code
        == 0
    )
    fetched = w.mint("wanda", "--repo", other.root, "fetch", w.url, "chat")
    line = one_line_error(fetched, "contract prod v1", code=1)
    assert ours[:12] in line and theirs[:12] in line
    assert {i.name for i in api.ls(other)} == {"coding"}
    other.close()


# --- item 6: numbers out of range are refused before any arithmetic ---------------------------


def commit_wire(repo, cid: str) -> dict:
    with repo.db.read() as conn:
        return sending.commit_wire(conn, cid)


# Where each bad number goes, and what it is. Commit ids cover files and meta but not the
# tensor index; a size of 12.0 or "12" for a 12-byte file keeps the id today's main computes.
NUMBERS = {
    "size": ("files", "1e400"),
    "float size": ("files", "{size}.0"),
    "string size": ("files", '"{size}"'),
    "shape": ("shape", "1e400"),
    "nbytes": ("nbytes", "1e400"),
    "offset": ("offset", "1e400"),
    "huge nbytes": ("nbytes", "1" + "0" * 30),
    "NaN meta": ("meta", "NaN"),
}


@pytest.mark.parametrize("where", sorted(NUMBERS))
def test_numbers_out_of_range_in_a_pushed_commit_are_refused(sqlite_refusing, tmp_path, where):
    w = sqlite_refusing
    other, _ = api.init(tmp_path / "other")
    api.base_add(other, "tiny-llama", w.models["base"])
    cid = api.commit(other, "numbers", w.models["a3"], "n", author="bob").id
    for blob in api.show(other, cid).files.values():  # the blobs are there: only numbers fail
        with w.server.client(w.tokens["wanda"]) as http, other.store.open(blob.sha256) as f:
            assert http.put(f"/api/v1/blobs/{blob.sha256}", content=f.read()).status_code < 300
    wire = commit_wire(other, cid)
    field, number = NUMBERS[where]
    path = sorted(wire["files"])[0]
    number = number.format(size=wire["files"][path][1])
    if field == "files":
        wire["files"][path][1] = "__N__"
    elif field == "meta":
        wire["meta"] = {"x": "__N__"}
    else:
        index = {"shape": 2, "nbytes": 4, "offset": 6}[field]
        wire["tensors"][0][index] = ["__N__"] if field == "shape" else "__N__"
    text = json.dumps({"bases": [], "commits": [wire], "evaluations": []})
    if where in ("size", "NaN meta"):  # the id of the content as sent: only the number is wrong
        value = float("inf") if where == "size" else float("nan")
        text = text.replace('"__N__"', "Infinity" if where == "size" else "NaN")
        wire = json.loads(text)["commits"][0]
        recompute_id(wire)  # json.dumps writes NaN and Infinity, as the id's canonical JSON does
        text = json.dumps({"bases": [], "commits": [wire], "evaluations": []})
        assert wire["id"] != cid and str(value) in repr(wire)
    error_of(w.post("wanda", text.replace('"__N__"', number)), 422, "InvalidObject")
    assert "InternalError" not in w.server.output() and "Traceback" not in w.server.output()
    assert "numbers" not in {i.name for i in api.ls(w.repo)}
    other.close()


@pytest.mark.parametrize("bad", ["a\x00b", "\ud800 hi", "x\udfff"])
def test_text_no_column_keeps_is_refused_by_every_receiver(bad):
    """What a fetch or clone reads from a registry passes `mint.exchange.received` as a push
    does: a NUL or a lone surrogate in a commit's text, or anywhere in its meta (keys too), is
    one InvalidObject line, before any row is written (a hostile registry can send it)."""
    from mint.errors import InvalidObject
    from mint.exchange import received

    with pytest.raises(InvalidObject, match="NUL or a lone surrogate"):
        received.text(bad, "message", max_len=100)
    for value in ({"k": bad}, {bad: 1}, [[bad]]):
        with pytest.raises(InvalidObject, match="NUL or a lone surrogate"):
            received.json_value(value, "meta")
    assert received.text("emoji \U0001f600", "message", max_len=100) == "emoji \U0001f600"
