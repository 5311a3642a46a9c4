"""Signed moves (issue 23): `mint promote/rollback --sign KEY` keeps a signed in-toto statement
of the move beside its history entry, `mint history --verify` says which trusted key signed
each move, and `mint registry protect CHANNEL --signed` refuses an unsigned move, one signed
by an untrusted key, and a statement replayed from another move. Forgeries on SQLite and
PostgreSQL (`repo`), in the repository and through a real `mint registry serve`; the private
key never appears in an output, the database or the registry's log."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from mint import api, schema
from mint.cli import run_in_process
from mint.errors import MoveNotSigned, MoveStatementMismatch
from mint.remote import signed_moves

from conftest import Result, one_line_error, refused, snapshot
from support.registry import create_token, running_registry
from support.signing import generate


@pytest.fixture
def two(repo, mint, models, tmp_path):
    """Lines chat (two commits) and code (one); alice's key trusted, bob's made but not."""
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    ids = {}
    for name, line, folder in (("c1", "chat", "a1"), ("c2", "chat", "a2"), ("k1", "code", "a3")):
        r = mint("commit", line, models[folder], "-m", name, "--json")
        assert r.code == 0, r
        ids[name] = r.json()["id"]
    alice, bob = generate(mint, tmp_path / "alice"), generate(mint, tmp_path / "bob")
    assert mint("key", "add", "alice", alice["public_key"]).code == 0
    return ids, alice, bob


def verified(run, ref: str) -> list[tuple]:
    r = run("history", ref, "--verify", "--json")
    assert r.code == 0, r
    return [(i["move"]["action"], i["state"], i["key"], i["why"]) for i in r.json()]


def bundle_of(repo, entry: int) -> str:
    with repo.db.read() as conn:
        m = schema.move_signatures.c
        return conn.execute(sa.select(m.bundle).where(m.entry == entry)).scalar_one()


def private_parts(key: dict) -> list[str]:
    """The private key's PEM body lines: none may appear anywhere."""
    lines = Path(key["private_key"]).read_text().splitlines()
    return [line for line in lines if line and not line.startswith("-----")]


def assert_no_private_key(text: str, *keys: dict) -> None:
    assert "PRIVATE KEY" not in text
    for key in keys:
        assert not any(part in text for part in private_parts(key))


def stored_text(repo) -> str:
    return repr(snapshot(repo))


# --- in the repository ------------------------------------------------------------------


def test_signed_promote_and_rollback_verify_in_history(repo, mint, two):
    ids, alice, _ = two
    outputs = []
    for args in (
        ("promote", ids["c1"], "--to", "production", "--sign", alice["private_key"]),
        ("promote", ids["c2"], "--to", "production", "--sign", alice["private_key"]),
        ("rollback", "chat@production", "--sign", alice["private_key"]),
        ("promote", ids["c2"], "--to", "production"),  # unsigned: the channel is not protected
    ):
        r = mint(*args)
        assert r.code == 0, r
        outputs.append(r.out + r.err)
    assert verified(mint, "chat@production") == [
        ("promote", "valid", "alice", None),
        ("promote", "valid", "alice", None),
        ("rollback", "valid", "alice", None),
        ("promote", "unsigned", None, None),
    ]
    table = mint("history", "chat@production", "--verify")
    assert table.code == 0 and table.out.count("signed by alice") == 3, table
    st = json.loads(base64.b64decode(json.loads(bundle_of(repo, 3))["dsseEnvelope"]["payload"]))
    assert st["predicateType"] == "https://mint.dev/move/v1"
    p = st["predicate"]
    assert (p["action"], p["line"], p["channel"]) == ("rollback", "chat", "production")
    assert (p["from"], p["to"], p["actor"]) == (
        ids["c2"],
        ids["c1"],
        api.history(repo, "chat@production")[2].by,
    )
    assert st["subject"][0] == {"name": "chat@production", "digest": {"sha256": ids["c1"]}}
    # A key removed from the trusted ones: its signatures stay, and no longer verify.
    assert mint("key", "rm", "alice").code == 0
    states = verified(mint, "chat@production")
    assert [s[1] for s in states[:3]] == ["invalid"] * 3 and "not trusted here" in states[0][3]
    assert_no_private_key("".join(outputs) + stored_text(repo), alice)


def test_a_signed_channel_refuses_unsigned_untrusted_and_replayed_moves(repo, mint, two):
    ids, alice, bob = two
    assert mint("registry", "protect", "production", "--signed").code == 0
    refused(mint, repo, ("promote", ids["c1"], "--to", "production"), "moves only when signed")
    untrusted = ("promote", ids["c1"], "--to", "production", "--sign", bob["private_key"])
    refused(mint, repo, untrusted, "not trusted here")
    # A genuine statement of a move of chat@staging, replayed onto chat@production and onto
    # code@production: refused as a statement of another move, nothing stored.
    r = mint("promote", ids["c1"], "--to", "staging", "--sign", alice["private_key"])
    assert r.code == 0, r
    staging = bundle_of(repo, api.history(repo, "chat@staging")[-1].id)
    before = snapshot(repo)
    with pytest.raises(MoveStatementMismatch, match="channel staging, not production"):
        api.promote(repo, ids["c1"], "production", by="tester", signature=staging)
    assert mint("promote", ids["k1"], "--to", "staging", "--sign", alice["private_key"]).code == 0
    code_staging = bundle_of(repo, api.history(repo, "code@staging")[-1].id)
    before = snapshot(repo)
    with pytest.raises(MoveStatementMismatch, match="line code, not chat"):
        api.promote(repo, ids["c2"], "staging", by="tester", signature=code_staging)
    assert snapshot(repo) == before
    # Signed by alice: the move is made, and verifies.
    r = mint("promote", ids["c1"], "--to", "production", "--sign", alice["private_key"])
    assert r.code == 0, r
    refused(mint, repo, ("promote", ids["c2"], "--to", "production"), "moves only when signed")
    assert verified(mint, "chat@production") == [("promote", "valid", "alice", None)]


def test_a_changed_byte_in_a_stored_signature_shows_invalid(repo, mint, two):
    ids, alice, _ = two
    for rev, channel in ((ids["c1"], "production"), (ids["c1"], "staging")):
        r = mint("promote", rev, "--to", channel, "--sign", alice["private_key"])
        assert r.code == 0, r
    production = api.history(repo, "chat@production")[-1].id
    bundle = json.loads(bundle_of(repo, production))
    sig = bytearray(base64.b64decode(bundle["dsseEnvelope"]["signatures"][0]["sig"]))
    sig[-1] ^= 1
    bundle["dsseEnvelope"]["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    m = schema.move_signatures.c
    with repo.db.write() as conn:
        conn.execute(
            schema.move_signatures.update()
            .where(m.entry == production)
            .values(bundle=json.dumps(bundle))
        )
    assert verified(mint, "chat@production") == [
        ("promote", "invalid", None, "its signature does not verify with the key it names")
    ]
    assert verified(mint, "chat@staging") == [("promote", "valid", "alice", None)]
    shown = mint("history", "chat@production", "--verify")
    assert "INVALID: its signature does not verify" in shown.out


def test_a_statement_replayed_in_the_database_shows_which_move_it_names(repo, mint, two):
    ids, alice, _ = two
    for channel in ("production", "staging"):
        r = mint("promote", ids["c1"], "--to", channel, "--sign", alice["private_key"])
        assert r.code == 0, r
    production = api.history(repo, "chat@production")[-1].id
    staging = api.history(repo, "chat@staging")[-1].id
    m = schema.move_signatures.c
    genuine = bundle_of(repo, production)
    with repo.db.write() as conn:
        conn.execute(
            schema.move_signatures.update().where(m.entry == staging).values(bundle=genuine)
        )
    [(_, state, _, why)] = verified(mint, "chat@staging")
    assert (state, why) == ("invalid", "it names channel production, not staging")


def test_a_wrong_password_or_key_fails_before_anything_moves(
    repo, mint, two, tmp_path, monkeypatch
):
    ids, _, _ = two
    not_a_key = tmp_path / "x.pem"
    not_a_key.write_text("nothing")
    refused(mint, repo, ("promote", ids["c1"], "--to", "production", "--sign", not_a_key), "key")
    monkeypatch.setenv("CI_KEY_PASSWORD", "correct horse")
    carol = generate(mint, tmp_path / "carol", "--password-env", "CI_KEY_PASSWORD")
    assert mint("key", "add", "carol", carol["public_key"]).code == 0
    signing = ("promote", ids["c1"], "--to", "production", "--sign", carol["private_key"])
    refused(mint, repo, signing, "encrypted")
    monkeypatch.setenv("WRONG", "battery staple")
    refused(mint, repo, (*signing, "--password-env", "WRONG"), "password is wrong")
    r = mint(*signing, "--password-env", "CI_KEY_PASSWORD")
    assert r.code == 0, r
    assert verified(mint, "chat@production") == [("promote", "valid", "carol", None)]
    assert "correct horse" not in r.out + r.err + stored_text(repo)


def test_anything_but_a_move_bundle_is_refused_in_one_error(repo, mint, two):
    ids, alice, _ = two
    r = mint("promote", ids["c1"], "--to", "staging", "--sign", alice["private_key"])
    assert r.code == 0, r
    genuine = json.loads(bundle_of(repo, api.history(repo, "chat@staging")[-1].id))
    commit_bundle = api.show(repo, ids["c1"]).signatures  # none: c1 is not signed
    payloads = [b"[]", b'"x"', b"{}", b'{"_type": 1}', b"\xff\xfe", b"not json"]
    garbage = ["", "x", "{}", "[]", json.dumps({**genuine, "dsseEnvelope": 1}), *commit_bundle]
    for data in payloads:
        env = {**genuine["dsseEnvelope"], "payload": base64.b64encode(data).decode()}
        garbage.append(json.dumps({**genuine, "dsseEnvelope": env}))
    hint = {**genuine, "verificationMaterial": {"publicKey": {"hint": ["x"]}}}
    garbage.append(json.dumps(hint))
    before = snapshot(repo)
    for bundle in garbage:
        with pytest.raises(MoveNotSigned):
            api.promote(repo, ids["c2"], "staging", by="tester", signature=bundle)
    assert snapshot(repo) == before


# --- through a registry -------------------------------------------------------------------


def test_signed_moves_through_a_registry(repo, mint, two, tmp_path, monkeypatch):
    """The client signs (the key never leaves it), the registry checks the statement against
    the move it makes; a signed channel refuses the unsigned, the untrusted and the replayed
    (403/409), and history --verify runs there."""
    ids, alice, bob = two
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    admin = create_token(repo.root, "ada", "admin")
    mover = create_token(repo.root, "max", "maintainer")
    outputs = []
    with running_registry(repo.root) as registry:

        def at(token: str, *args) -> Result:
            monkeypatch.setenv("MINT_TOKEN", token)
            r = Result(*run_in_process(["--repo", registry.url, *map(str, args)]))
            outputs.append(r.out + r.err)
            return r

        r = at(admin, "registry", "protect", "production", "--signed", "--json")
        assert r.code == 0 and r.json()["signed"] is True, r
        before = snapshot(repo)
        one_line_error(at(mover, "promote", ids["c1"], "--to", "production"), "only when signed")
        untrusted = at(
            mover, "promote", ids["c1"], "--to", "production", "--sign", bob["private_key"]
        )
        one_line_error(untrusted, "not trusted here")
        assert snapshot(repo) == before
        for args in (
            ("promote", ids["c1"], "--to", "production"),
            ("promote", ids["c2"], "--to", "production"),
            ("rollback", "chat@production"),
            ("promote", ids["c1"], "--to", "staging"),
        ):
            r = at(mover, *args, "--sign", alice["private_key"])
            assert r.code == 0, r
        assert verified(lambda *a: at(mover, *a), "chat@production") == [
            ("promote", "valid", "alice", None),
            ("promote", "valid", "alice", None),
            ("rollback", "valid", "alice", None),
        ]
        assert [m.by for m in api.history(repo, "chat@production")] == ["max"] * 3
        # Replays through the API: staging's statement onto production, onto another line.
        staging = bundle_of(repo, api.history(repo, "chat@staging")[-1].id)
        before = snapshot(repo)
        with registry.client(mover) as http:
            body = {"rev": ids["c2"], "channel": "production", "signature": staging}
            answer = http.post("/api/v1/promote", json=body)
            assert answer.status_code == 409, answer.text
            assert "channel staging, not production" in answer.json()["error"]["message"]
            body = {"rev": ids["k1"], "channel": "staging", "signature": staging}
            answer = http.post("/api/v1/promote", json=body)
            assert answer.status_code == 409, answer.text
            assert "line chat, not code" in answer.json()["error"]["message"]
            unsigned = http.post(
                "/api/v1/promote", json={"rev": ids["c2"], "channel": "production"}
            )
            assert unsigned.status_code == 403, unsigned.text
            body = {"rev": ids["c2"], "channel": "production", "signature": "not a bundle"}
            garbage = http.post("/api/v1/promote", json=body)
            assert garbage.status_code == 403 and "unreadable" in garbage.text, garbage.text
        assert snapshot(repo) == before
        # A changed byte in the stored bundle: invalid, through the registry too.
        entry = api.history(repo, "chat@production")[0].id
        changed = json.loads(bundle_of(repo, entry))
        payload = base64.b64decode(changed["dsseEnvelope"]["payload"])
        payload = payload.replace(b'"actor": "max"', b'"actor": "mat"')  # one byte
        changed["dsseEnvelope"]["payload"] = base64.b64encode(payload).decode()
        changed = json.dumps(changed)
        m = schema.move_signatures.c
        with repo.db.write() as conn:
            conn.execute(
                schema.move_signatures.update().where(m.entry == entry).values(bundle=changed)
            )
        states = verified(lambda *a: at(mover, *a), "chat@production")
        assert states[0][1:] == (
            "invalid",
            None,
            "its signature does not verify with the key it names",
        )
        assert [s[1] for s in states[1:]] == ["valid", "valid"]
        log = registry.output()
    assert_no_private_key("".join(outputs) + log + stored_text(repo), alice, bob)


def test_a_move_between_plan_and_signature_is_planned_again_up_to_three_times(
    repo, mint, models, two, tmp_path, monkeypatch
):
    """Through a registry the client plans the move, signs it, sends it: another token moving
    the channel in between (here: inside the signing step, at that exact point) makes the
    registry answer 409, and the client plans and signs again; three such moves, it gives up."""
    ids, alice, _ = two
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    r = mint("commit", "chat", models["a3"], "-m", "c3", "--json")
    assert r.code == 0, r
    c1, c2, c3 = ids["c1"], ids["c2"], r.json()["id"]
    assert mint("promote", c1, "--to", "production").code == 0
    mover = create_token(repo.root, "max", "maintainer")
    other = create_token(repo.root, "mia", "maintainer")
    interfering: list[str] = []  # where mia moves the channel, one move per signing
    real_sign = signed_moves.sign_statement

    with running_registry(repo.root) as registry:

        def sign_then_move(statement, key):
            bundle = real_sign(statement, key)
            if interfering:
                with registry.client(other) as http:
                    body = {"rev": interfering.pop(0), "channel": "production"}
                    answer = http.post("/api/v1/promote", json=body)
                    assert answer.status_code == 200, answer.text
            return bundle

        def at(*args) -> Result:
            monkeypatch.setenv("MINT_TOKEN", mover)
            return Result(*run_in_process(["--repo", registry.url, *map(str, args)]))

        monkeypatch.setattr(signed_moves, "sign_statement", sign_then_move)
        interfering[:] = [c3]
        r = at("promote", c2, "--to", "production", "--sign", alice["private_key"])
        assert r.code == 0 and interfering == [], r
        moves = api.history(repo, "chat@production")
        assert [(m.from_, m.to, m.by) for m in moves[1:]] == [(c1, c3, "mia"), (c3, c2, "max")]
        assert verified(at, "chat@production") == [
            ("promote", "unsigned", None, None),
            ("promote", "unsigned", None, None),
            ("promote", "valid", "alice", None),  # signed over c3 -> c2, the second plan
        ]
        # Moved again after each of three plans: one line, and the client's move not made.
        interfering[:] = [c1, c2, c1]
        r = at("promote", c3, "--to", "production", "--sign", alice["private_key"])
        one_line_error(r, "the channel moved while this move was being signed 3 times")
        assert "run the command again" in r.err and interfering == []
        moves = api.history(repo, "chat@production")
        assert [(m.to, m.by) for m in moves[3:]] == [(c1, "mia"), (c2, "mia"), (c1, "mia")]


def test_an_old_statement_replayed_after_the_channel_moved_back_is_refused(repo, mint, two):
    """c1 -> c2 signed, then rolled back to c1: the c1 -> c2 statement names the channel's
    state before the rollback, so it cannot move the channel again."""
    ids, alice, _ = two
    for args in (
        ("promote", ids["c1"], "--to", "production"),
        ("promote", ids["c2"], "--to", "production", "--sign", alice["private_key"]),
        ("rollback", "chat@production"),
    ):
        assert mint(*args).code == 0
    old = bundle_of(repo, api.history(repo, "chat@production")[1].id)
    before = snapshot(repo)
    with pytest.raises(MoveStatementMismatch, match="history entry"):
        api.promote(
            repo,
            ids["c2"],
            "production",
            by=api.history(repo, "chat@production")[1].by,
            signature=old,
        )
    assert snapshot(repo) == before
