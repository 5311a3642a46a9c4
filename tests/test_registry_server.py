"""The registry server: real `mint registry serve` processes, called with httpx.

One server per database (SQLite and PostgreSQL) serves the module's tests; each test works on
its own lines or channels. Replicas are two processes over one PostgreSQL database.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
import sqlalchemy as sa

from mint import api
from mint import schema as s
from mint.cli import run_in_process
from mint.errors import RevisionNotFound
from mint.exchange import sending

from support.pgdb import pg_database
from support.registry import Registry, create_token, error_of, start_registry
from support.texts import PRODUCTION_ACCURACY, RELEASE_ACCURACY

pytestmark = pytest.mark.xdist_group("registry")

MAX_BODY, MAX_BLOB = 64 * 1024, 1024 * 1024
TOKENS = {
    "admin": ("admin", ()),
    "writer": ("writer", ()),
    "maintainer": ("maintainer", ()),
    "maintainer2": ("maintainer", ()),
    "reader": ("reader", ()),
    "chatty": ("writer", ("chat*",)),  # a writer limited to lines matching chat*
}


@dataclass
class Env:
    root: Path
    repo: object
    server: Registry
    tokens: dict[str, str]
    ids: dict[str, str]
    folder: Path
    models: dict
    clients: dict[str, httpx.Client] = field(default_factory=dict)

    def as_(self, who: str | None) -> httpx.Client:
        """A client acting as token WHO (None: no token)."""
        if who not in self.clients:
            self.clients[who] = self.server.client(self.tokens[who] if who else None)
        return self.clients[who]


def variant(adapter: Path, dest: Path, tag: str) -> Path:
    """A copy of ADAPTER whose config differs (so a commit of it is a new commit)."""
    shutil.copytree(adapter, dest)
    config = json.loads((dest / "adapter_config.json").read_text())
    config["revision"] = tag
    (dest / "adapter_config.json").write_text(json.dumps(config))
    return dest


def cli(root: Path, *args: str) -> tuple[int, str, str]:
    return run_in_process(["--repo", str(root), *map(str, args)])


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def env(request, tmp_path_factory, models):
    with contextlib.ExitStack() as stack:
        url = None if request.param == "sqlite" else stack.enter_context(pg_database())
        folder = tmp_path_factory.mktemp(f"registry-{request.param}")
        repo, _ = api.init(folder / "repo", url)
        stack.callback(repo.close)
        api.base_add(repo, "tiny-llama", models["base"])
        ids = {
            "c1": api.commit(repo, "chat", models["a1"], "first", author="alice").id,
            "c2": api.commit(
                repo, "chat", variant(models["a1"], folder / "v2", "r2"), "second", author="alice"
            ).id,
            "coding": api.commit(repo, "coding", models["a3"], "coder", author="bob").id,
        }
        for name, text in (("production", PRODUCTION_ACCURACY), ("release", RELEASE_ACCURACY)):
            (folder / f"{name}.toml").write_text(text)
            api.contract_add(repo, folder / f"{name}.toml", by="admin")
        tokens = {
            n: create_token(repo.root, n, role, lines) for n, (role, lines) in TOKENS.items()
        }
        for channel in ("production", "release"):
            assert cli(repo.root, "registry", "protect", channel)[0] == 0
        args = ("--max-body", str(MAX_BODY), "--max-blob", str(MAX_BLOB))
        server = start_registry(repo.root, args=args)
        stack.callback(server.stop)
        e = Env(repo.root, repo, server, tokens, ids, folder, models)
        stack.callback(lambda: [c.close() for c in e.clients.values()])
        yield e


# --- identity -----------------------------------------------------------------------------


def test_health_and_openapi_are_open_everything_else_needs_a_token(env):
    anonymous = env.as_(None)
    assert anonymous.get("/healthz").json() == {"status": "ok"}
    assert "/api/v1/promote" in anonymous.get("/openapi.json").json()["paths"]
    answer = anonymous.get("/api/v1/lines")
    error_of(answer, 401, "Unauthenticated")
    assert answer.headers["www-authenticate"] == "Bearer"
    for header in ("Bearer mint_wrong", "Basic YWxpY2U6cHc=", "Bearer", "mint_x"):
        error_of(
            httpx.get(f"{env.server.url}/api/v1/lines", headers={"Authorization": header}), 401
        )
    assert env.as_("chatty").get("/api/v1/whoami").json() == {
        "name": "chatty",
        "role": "writer",
        "lines": ["chat*"],
    }


def test_a_revoked_token_is_refused_at_once_and_secrets_are_never_shown(env):
    # The registry believes a good token from memory (mint.registry.auth.TokenCache) only
    # while nothing was revoked: a revoke made by another process (the repository's own CLI)
    # is honoured on the very next request (issue 35).
    secret = create_token(env.root, "temp", "reader", subprocess_cli=True)
    with env.server.client(secret) as client:
        for _ in range(2):  # read from the table, then believed
            assert client.get("/api/v1/whoami").status_code == 200
        assert cli(env.root, "registry", "token", "revoke", "temp")[0] == 0
        error_of(client.get("/api/v1/whoami"), 401, "Unauthenticated")
    code, out, _ = cli(env.root, "registry", "token", "ls", "--json")
    listed = {t["name"]: t for t in json.loads(out)}
    assert listed["temp"]["revoked_at"] and listed["writer"]["revoked_at"] is None
    log = env.server.output()
    for shown in [*env.tokens.values(), secret]:
        assert shown not in out and shown not in log
    assert "authorization" not in log.lower()
    code, _, err = cli(env.root, "registry", "token", "create", "temp", "--role", "reader")
    assert code != 0 and "not reused" in err


def test_roles_and_line_globs_refuse_with_403(env):
    c1 = env.ids["c1"]
    error_of(
        env.as_("reader").post("/api/v1/tags", json={"tag": "r1", "rev": c1}), 403, "Forbidden"
    )
    assert env.as_("reader").get(f"/api/v1/commits/{c1}").json()["id"] == c1
    chatty = env.as_("chatty")
    error_of(chatty.get(f"/api/v1/commits/{env.ids['coding']}"), 403, "Forbidden")
    error_of(chatty.get("/api/v1/log", params={"rev": "coding"}), 403)
    error_of(chatty.post("/api/v1/tags", json={"tag": "mine", "rev": "coding"}), 403)
    assert {line["name"] for line in chatty.get("/api/v1/lines").json()} == {"chat"}
    assert {c["line"] for c in chatty.get("/api/v1/log").json()} == {"chat"}
    coding_blob = api.show(env.repo, "coding").files["adapter_model.safetensors"].sha256
    error_of(chatty.get(f"/api/v1/blobs/{coding_blob}"), 403)
    made = chatty.post("/api/v1/tags", json={"tag": "chatty-v1", "rev": c1})
    assert made.status_code == 200, made.text
    assert api.resolve(env.repo, "chat@chatty-v1") == c1


def test_unknown_revisions_and_objects_are_404(env):
    reader = env.as_("reader")
    error_of(reader.get(f"/api/v1/commits/{quote('chat@nope')}"), 404, "RevisionNotFound")
    error_of(reader.get("/api/v1/resolve", params={"rev": "nosuchline"}), 404)
    error_of(reader.get("/api/v1/history", params={"ref": "chat@nowhere"}), 404)
    error_of(reader.get("/api/v1/contracts/nope"), 404)
    error_of(reader.get("/api/v1/lines/nope/objects"), 404)
    error_of(reader.get(f"/api/v1/blobs/{'0' * 64}"), 404, "BlobMissing")
    assert reader.get("/api/v1/resolve", params={"rev": "chat~1"}).json() == {"id": env.ids["c1"]}


def test_the_registry_commands_on_the_repository(env):
    code, out, err = cli(env.root, "registry", "token", "create", "shown-once", "--role", "reader")
    assert code == 0 and out.strip().startswith("mint_") and len(out.split()) == 1
    assert "not shown again" in err
    with env.server.client(out.strip()) as client:
        assert client.get("/api/v1/whoami").json()["name"] == "shown-once"
    code, _, err = cli(env.root, "registry", "token", "create", "x", "--role", "owner")
    assert code == 2 and "owner" in err
    code, _, err = cli(env.root, "registry", "token", "create", "bad/name", "--role", "reader")
    assert code == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    code, _, err = cli(env.root, "registry", "token", "revoke", "nobody")
    assert code == 1 and "no token named nobody" in err
    code, _, _ = cli(env.root, "registry", "protect", "gold", "--role", "reader")
    assert code == 2
    assert cli(env.root, "registry", "protect", "gold", "--role", "admin")[0] == 0
    code, out, _ = cli(env.root, "registry", "protected", "--json")
    assert {p["channel"]: p["role"] for p in json.loads(out)}["gold"] == "admin"
    assert "no longer protected" in cli(env.root, "registry", "unprotect", "gold")[1]
    assert "was not protected" in cli(env.root, "registry", "unprotect", "gold")[1]
    # tokens, protection and webhooks work through the registry too (tests/test_team_remote.py)
    code, _, err = run_in_process(["--repo", env.server.url, "registry", "serve", "--port", "0"])
    assert code == 1 and "runs only where the repository is" in err


# --- writes ---------------------------------------------------------------------------------


def test_a_moved_tag_is_409_and_forcing_it_needs_a_maintainer(env):
    c1, c2 = env.ids["c1"], env.ids["c2"]
    assert env.as_("writer").post("/api/v1/tags", json={"tag": "v1", "rev": c1}).status_code == 200
    error_of(
        env.as_("writer").post("/api/v1/tags", json={"tag": "v1", "rev": c2}), 409, "TagExists"
    )
    forced = {"tag": "v1", "rev": c2, "force": True}
    error_of(env.as_("writer").post("/api/v1/tags", json=forced), 403)
    moved = env.as_("maintainer").post("/api/v1/tags", json=forced)
    assert moved.status_code == 200 and moved.json()["target"] == c2
    tags = env.as_("reader").get("/api/v1/tags", params={"line": "chat"}).json()
    assert {t["name"]: t["target"] for t in tags}["v1"] == c2
    error_of(env.as_("writer").delete("/api/v1/tags/chat/v1"), 403)
    assert env.as_("maintainer").delete("/api/v1/tags/chat/v1").json()["target"] == c2


def test_a_refused_gate_is_409_with_its_report(env):
    body = {"rev": env.ids["c2"], "channel": "production"}
    error = error_of(env.as_("maintainer").post("/api/v1/promote", json=body), 409, "GateRefused")
    report = error["detail"]
    assert report["ok"] is False and report["contracts"] == ["production@v1"]
    assert any(c["check"].startswith("evaluation under production") for c in report["checks"])
    gate = env.as_("reader").get(
        "/api/v1/gate", params={"rev": env.ids["c2"], "channel": "production"}
    )
    assert gate.json() == report


def test_protected_channels_and_every_move_names_the_token(env):
    c1, c2 = env.ids["c1"], env.ids["c2"]
    for rev in (c1, c2):
        body = {"rev": rev, "contract": "production", "metrics": {"accuracy": 0.9}}
        recorded = env.as_("writer").post("/api/v1/evaluations", json=body)
        assert recorded.status_code == 200, recorded.text
        assert recorded.json()["by"] == "writer" and recorded.json()["checks"][0]["ok"]
    promote = {"rev": c1, "channel": "production"}
    error_of(env.as_("writer").post("/api/v1/promote", json=promote), 403, "Forbidden")
    assert env.as_("maintainer").post("/api/v1/promote", json=promote).json()["by"] == "maintainer"
    forced = {"rev": c2, "channel": "production", "force": True, "reason": "hotfix"}
    error_of(env.as_("maintainer").post("/api/v1/promote", json=forced), 403)
    assert env.as_("admin").post("/api/v1/promote", json=forced).json()["to"] == c2
    back = {"ref": "chat@production", "reason": "bad"}
    error_of(env.as_("writer").post("/api/v1/rollback", json=back), 403)
    assert env.as_("maintainer").post("/api/v1/rollback", json=back).json()["to"] == c1
    staged = env.as_("writer").post("/api/v1/promote", json={"rev": c1, "channel": "staging"})
    assert staged.status_code == 200 and staged.json()["by"] == "writer"  # not protected
    served = env.as_("reader").get("/api/v1/history", params={"ref": "chat@production"}).json()
    assert [m["by"] for m in served] == ["maintainer", "admin", "maintainer"]
    assert served == json.loads(
        json.dumps([_jsonable(m) for m in api.history(env.repo, "chat@production")])
    )
    error_of(env.as_("writer").post("/api/v1/approvals", json=promote), 403)
    approved = env.as_("maintainer").post("/api/v1/approvals", json=promote).json()
    assert approved["by"] == "maintainer" and approved["created"] is True


def _jsonable(obj):
    from mint.jsonable import to_jsonable

    return to_jsonable(obj)


# --- bad input ------------------------------------------------------------------------------


def test_oversize_bodies_are_413_and_change_nothing(env):
    big = {
        "rev": "chat",
        "contract": "production",
        "metrics": {"x" * 10: 1.0},
        "evaluator": {"note": "y" * MAX_BODY},
    }
    error_of(env.as_("writer").post("/api/v1/evaluations", json=big), 413, "PayloadTooLarge")
    chunks = (b'{"ids": [' + b'"' + b"a" * 64 + b'",' for _ in range(2000))
    streamed = env.as_("writer").post(
        "/api/v1/blobs/missing", content=chunks, headers={"content-type": "application/json"}
    )
    error_of(streamed, 413)
    data = b"z" * (MAX_BLOB + 1)
    blob = hashlib.sha256(data).hexdigest()
    error_of(env.as_("writer").put(f"/api/v1/blobs/{blob}", content=data), 413)
    assert not env.repo.store.has(blob)


@pytest.mark.parametrize(
    "path, body",
    [
        ("/api/v1/promote", {"rev": 5, "channel": "x"}),
        ("/api/v1/promote", {"channel": "production"}),
        ("/api/v1/promote", {"rev": "chat", "channel": "x", "by": "someone-else"}),
        ("/api/v1/tags", {"tag": "t\x00", "rev": "chat"}),
        ("/api/v1/tags", b'{"tag": "ok", "rev": "chat", "message": "\\ud800"}'),
        ("/api/v1/evaluations", {"rev": "chat", "contract": "production", "metrics": {"a": "x"}}),
        (
            "/api/v1/evaluations",
            {"rev": "chat", "contract": "c", "metrics": {}, "data_hash": "h" * 65},
        ),
        (
            "/api/v1/evaluations",
            {
                "rev": "chat",
                "contract": "production",
                "metrics": {},
                "evaluator": {"deep": json.loads("[" * 80 + "]" * 80)},
            },
        ),
        ("/api/v1/blobs/missing", {"ids": ["not-hex"]}),
        ("/api/v1/lines/chat/head", {"old": None, "new": "xyz"}),
        ("/api/v1/objects", {"commits": [{"id": "0" * 64}]}),
        ("/api/v1/objects", {"commits": "nope"}),
        ("/api/v1/contracts", {"source": "name = [unclosed"}),
        ("/api/v1/tags", {"tag": "bad name", "rev": "chat"}),
    ],
)
def test_malformed_input_is_422_never_500(env, path, body):
    raw = {"content": body, "headers": {"content-type": "application/json"}}
    error_of(
        env.as_("admin").post(path, **(raw if isinstance(body, bytes) else {"json": body})), 422
    )


def test_unparseable_bodies_and_queries_are_client_errors(env):
    admin = env.as_("admin")
    raw = admin.post(
        "/api/v1/promote", content=b"{not json", headers={"content-type": "application/json"}
    )
    error_of(raw, 422, "InvalidRequest")
    error_of(admin.get("/api/v1/log", params={"n": 0}), 422)
    error_of(admin.get("/api/v1/blobs/not-a-blob-id"), 422)
    error_of(admin.get("/api/v1/nothing-here"), 404, "NotFound")
    error_of(admin.delete("/api/v1/lines"), 405, "MethodNotAllowed")


# --- blobs ----------------------------------------------------------------------------------


def _temps(env) -> list[str]:
    folder = Path(env.repo.store.tmp)
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_blob_upload_is_checked_against_its_id_and_download_verified(env):
    writer, data = env.as_("writer"), b"registry blob " * 1000
    blob = hashlib.sha256(data).hexdigest()
    assert writer.post("/api/v1/blobs/missing", json={"ids": [blob]}).json() == {"missing": [blob]}
    wrong = writer.put(f"/api/v1/blobs/{blob}", content=data + b"!")
    error_of(wrong, 422, "InvalidObject")
    assert not env.repo.store.has(blob) and _temps(env) == []
    stored = writer.put(f"/api/v1/blobs/{blob}", content=data)
    assert stored.status_code == 201 and stored.json() == {
        "id": blob,
        "size": len(data),
        "written": True,
    }
    assert writer.put(f"/api/v1/blobs/{blob}", content=data).status_code == 200
    assert writer.post("/api/v1/blobs/missing", json={"ids": [blob]}).json() == {"missing": []}
    error_of(writer.put(f"/api/v1/blobs/{blob}", content=iter([data])), 411)
    reader = env.as_("reader")
    assert reader.get(f"/api/v1/blobs/{blob}").content == data
    error_of(env.as_("chatty").get(f"/api/v1/blobs/{blob}"), 403)  # no commit of chat* holds it
    part = reader.get(f"/api/v1/blobs/{blob}", headers={"Range": "bytes=3-12"})
    assert part.status_code == 206 and part.content == data[3:13]


def test_an_upload_cut_off_half_way_stores_nothing(env):
    data = b"half a blob " * 5000
    blob = hashlib.sha256(data).hexdigest()
    host, port = env.server.url.removeprefix("http://").split(":")
    head = (
        f"PUT /api/v1/blobs/{blob} HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {env.tokens['writer']}\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(head.encode() + data[: len(data) // 2])
    assert env.as_("reader").get("/healthz").status_code == 200
    assert not env.repo.store.has(blob)
    assert _wait(lambda: _temps(env) == [])


def _wait(predicate, seconds: float = 5.0) -> bool:

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


# --- push and fetch through the routes ------------------------------------------------------


def source_repo(env, name: str, line: str, n: int, author: str = "alice"):
    """A local repository with N commits on LINE (each a variant of adapter a1)."""
    repo, _ = api.init(env.folder / name)
    api.base_add(repo, "tiny-llama", env.models["base"])
    ids = []
    for i in range(n):
        folder = variant(env.models["a1"], env.folder / f"{name}-{i}", f"{name}{i}")
        ids.append(api.commit(repo, line, folder, f"{name} {i}", author=author).id)
    return repo, ids


def send_objects(client: httpx.Client, source, ids: list[str]) -> httpx.Response:
    """Push the commits IDS of SOURCE: missing blobs first, then the objects."""
    with source.db.read() as conn:
        payload = sending.export_objects(conn, ids)
        blobs = sending.blob_sizes(conn, ids)
    missing = client.post("/api/v1/blobs/missing", json={"ids": sorted(blobs)})
    for blob in missing.json()["missing"]:
        with source.store.open(blob) as f:
            assert client.put(f"/api/v1/blobs/{blob}", content=f.read()).status_code == 201
    return client.post("/api/v1/objects", json=payload)


def test_push_records_the_pusher_and_moves_the_head_fast_forward_only(env):
    source, ids = source_repo(env, "team-src", "team", 3)
    writer = env.as_("writer")
    sent = send_objects(writer, source, ids[:2])
    nothing_moved = {"heads": [], "tags": [], "signatures": 0}  # none asked for with the objects
    assert sent.status_code == 200
    assert sent.json() == {"stored": ids[:2], "present": [], **nothing_moved}
    again = send_objects(writer, source, ids[:2]).json()
    assert again == {"stored": [], "present": ids[:2], **nothing_moved}
    head = "/api/v1/lines/team/head"
    assert writer.post(head, json={"old": None, "new": ids[1]}).json() == {
        "line": "team",
        "head": ids[1],
    }
    error_of(writer.post(head, json={"old": None, "new": ids[0]}), 409, "RefConflict")
    error_of(writer.post(head, json={"old": ids[1], "new": ids[0]}), 409, "NotFastForward")
    error_of(writer.post(head, json={"old": ids[1], "new": ids[0], "force": True}), 403)
    with env.repo.db.read() as conn:
        c = s.commits.c
        rows = conn.execute(sa.select(c.author, c.pushed_by).where(c.id.in_(ids[:2]))).all()
    assert set(rows) == {("alice", "writer")}
    fetched = env.as_("reader").get("/api/v1/lines/team/objects", params={"have": [ids[0]]}).json()
    assert fetched["head"] == ids[1] and [c["id"] for c in fetched["commits"]] == [ids[1]]
    with source.db.read() as conn:
        assert fetched["commits"] == [sending.commit_wire(conn, ids[1])]
    source.close()


def test_pushed_objects_are_checked_before_anything_is_recorded(env):
    source, ids = source_repo(env, "bad-src", "bad", 1)
    writer = env.as_("writer")
    with source.db.read() as conn:
        payload = sending.export_objects(conn, ids)
    message, payload["commits"][0]["message"] = payload["commits"][0]["message"], "tampered"
    error_of(writer.post("/api/v1/objects", json=payload), 422, "InvalidObject")
    payload["commits"][0]["message"] = message
    error_of(writer.post("/api/v1/objects", json=payload), 422, "MissingObjects")  # no blobs yet
    error_of(env.as_("chatty").post("/api/v1/objects", json=payload), 403)  # line outside chat*
    error_of(env.as_("reader").post("/api/v1/objects", json=payload), 403)
    with pytest.raises(RevisionNotFound):
        api.resolve(env.repo, ids[0])
    source.close()


def test_only_an_admin_adds_contract_versions_by_pushing_evaluations(env):
    source, ids = source_repo(env, "ev-src", "evs", 1)
    loose = env.folder / "loose.toml"
    loose.write_text('name = "production"\nchannel = "production"\n')
    api.contract_add(source, env.folder / "production.toml", by="alice")  # v1, as on the server
    api.contract_add(source, loose, by="alice")  # v2: a looser gate, only here
    api.record_evaluation(source, ids[0], "production", {}, source="manual", by="alice")
    error_of(send_objects(env.as_("writer"), source, ids), 403, "Forbidden")
    assert send_objects(env.as_("admin"), source, ids).status_code == 200
    assert api.contract_show(env.repo, "production").version == 2
    source.close()


def pushed_for_release(env, line: str) -> str:
    """A commit authored by maintainer2, pushed by maintainer, evaluated under `release`."""
    source, ids = source_repo(env, f"{line}-src", line, 1, author="maintainer2")
    maintainer = env.as_("maintainer")
    assert send_objects(maintainer, source, ids).status_code == 200
    moved = maintainer.post(f"/api/v1/lines/{line}/head", json={"old": None, "new": ids[0]})
    assert moved.status_code == 200
    body = {"rev": ids[0], "contract": "release", "metrics": {"accuracy": 0.8}}
    assert env.as_("writer").post("/api/v1/evaluations", json=body).status_code == 200
    source.close()
    return ids[0]


def test_author_and_pusher_are_self_approvers_on_a_protected_channel(env):
    from mint.gates.checks import self_approvers

    cid = pushed_for_release(env, "rel")
    with env.repo.db.read() as conn:
        assert self_approvers(conn, cid, "release") == ["maintainer", "maintainer2"]
        assert self_approvers(conn, cid, "staging") == []  # not protected


def test_self_approvals_do_not_open_a_protected_gate(env):
    cid = pushed_for_release(env, "rel2")
    approve = {"rev": cid, "channel": "release"}
    for who in ("maintainer", "maintainer2"):  # the pusher and the author
        assert env.as_(who).post("/api/v1/approvals", json=approve).status_code == 200
    error_of(env.as_("maintainer").post("/api/v1/promote", json=approve), 409, "GateRefused")
    third = create_token(env.root, "maintainer3", "maintainer")
    with env.server.client(third) as other:
        assert other.post("/api/v1/approvals", json=approve).status_code == 200
    assert env.as_("maintainer").post("/api/v1/promote", json=approve).json()["to"] == cid


# --- the schema -----------------------------------------------------------------------------

# Per operation: `make test` runs a few (derandomized: the same ones each run); `make fuzz`
# runs MINT_SCHEMA_EXAMPLES (100) positive examples and a third as many negative ones.
_MANY = int(os.environ.get("MINT_SCHEMA_EXAMPLES", "15"))
EXAMPLES = {"positive": _MANY, "negative": max(5, _MANY // 3)}


# On PostgreSQL only: it refuses more values than SQLite (lengths, NULs, encodings), and the
# server's code is the same over both; one run keeps the module's time in bounds.
@pytest.mark.parametrize("env", ["postgresql"], indirect=True)
def test_schemathesis_finds_no_server_error_and_no_answer_outside_the_schema(env):
    import requests
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import response_schema_conformance

    schema = schemathesis.openapi.from_url(f"{env.server.url}/openapi.json")
    headers = {"Authorization": f"Bearer {env.tokens['admin']}"}
    checks = [not_a_server_error, response_schema_conformance]
    failures, session = [], requests.Session()
    for operation in (result.ok() for result in schema.get_all_operations()):
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(
                max_examples=EXAMPLES[mode.value],
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def call(case):
                response = case.call(session=session, headers=headers, timeout=30)
                case.validate_response(response, checks=checks)

            try:
                call()
            except Unsatisfiable:
                pass  # nothing to make wrong in a request without parameters (GET /healthz)
            except Exception as exc:  # noqa: BLE001 - collected, reported together below
                failures.append(f"{operation.label} ({mode.value}): {exc}"[:2000])
    session.close()
    assert failures == []


def test_no_request_reached_the_catch_all(env):
    """Every answer so far, bad input included, was an expected one: the log has no 500."""
    log = env.server.output()
    assert " 500 " not in log and "Traceback" not in log and "InternalError" not in log


# --- replicas -------------------------------------------------------------------------------


def at_once(calls: list) -> list[httpx.Response]:
    """Run CALLS (functions of no arguments) in threads released together."""
    barrier, results = threading.Barrier(len(calls)), [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        results[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return results


@pytest.fixture(scope="module")
def replicas(tmp_path_factory, models):
    """Two `mint registry serve` processes over one PostgreSQL database and one store."""
    with contextlib.ExitStack() as stack:
        folder = tmp_path_factory.mktemp("replicas")
        repo, _ = api.init(folder / "repo", stack.enter_context(pg_database()))
        stack.callback(repo.close)
        token = create_token(repo.root, "racer", "writer")
        servers = [start_registry(repo.root) for _ in range(2)]
        for server in servers:
            stack.callback(server.stop)
        clients = [stack.enter_context(server.client(token)) for server in servers]
        e = Env(repo.root, repo, servers[0], {"racer": token}, {}, folder, models)
        yield e, clients


def test_two_replicas_lose_no_update_when_eight_clients_race(replicas):
    env, clients = replicas
    source, ids = source_repo(env, "race-src", "race", 9)
    assert send_objects(clients[1], source, ids).status_code == 200
    head = "/api/v1/lines/race/head"
    assert clients[0].post(head, json={"old": None, "new": ids[0]}).status_code == 200
    moves = at_once(
        [
            lambda i=i: clients[i % 2].post(head, json={"old": ids[0], "new": ids[i]})
            for i in range(1, 9)
        ]
    )
    won = [r for r in moves if r.status_code == 200]
    assert len(won) == 1, [r.text for r in moves]
    for lost in (r for r in moves if r.status_code != 200):
        assert "moved" in error_of(lost, 409, "RefConflict")["message"]
    assert api.resolve(env.repo, "race") == won[0].json()["head"]

    promote = "/api/v1/promote"
    promotes = at_once(
        [
            lambda i=i: clients[i % 2].post(promote, json={"rev": ids[i], "channel": "canary"})
            for i in range(1, 9)
        ]
    )
    for r in promotes:
        assert r.status_code == 200 or error_of(r, 409, "RefConflict"), r.text
    history = api.history(env.repo, "race@canary")
    assert len(history) == sum(r.status_code == 200 for r in promotes)
    assert [m.from_ for m in history] == [None] + [m.to for m in history[:-1]]  # one chain
    assert api.resolve(env.repo, "race@canary") == history[-1].to
    assert {m.by for m in history} == {"racer"}
    source.close()
