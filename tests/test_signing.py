"""Signing in the OpenSSF model-signing format (issue 23): keys, commit --sign, the checkout's
model.sig, mint verify, interop both ways with the unmodified model_signing (its CLI as a
process, its library), and forgeries refused in one line. SQLite and PostgreSQL (`repo`)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st
from model_signing import verifying

from mint import api, schema
from mint.cli import run_in_process
from mint.errors import InvalidSignature
from mint.exchange import receiving, sending
from mint.signing.bundle import read as read_bundle_bytes

from conftest import Result, one_line_error, refused, snapshot
from support.registry import create_token, running_registry
from support.signing import generate, model_signing_cli, verified_by_model_signing
from support.texts import MACARON

pytestmark = pytest.mark.one_database(
    "sqlite",
    "signatures are files checked by model_signing; test_signing_trust and test_signed_moves"
    " store them on both databases",
)


WEIGHTS = "adapter_model.safetensors"


@pytest.fixture
def signed(mint, models, tmp_path):
    """A trusted key alice, and chat's head signed by it. Returns alice's generated key."""
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    alice = generate(mint, tmp_path / "alice")
    assert mint("key", "add", "alice", alice["public_key"]).code == 0
    r = mint("commit", "chat", models["a1"], "-m", "one", "--sign", alice["private_key"])
    assert r.code == 0, r
    return alice


# --- keys ------------------------------------------------------------------------------


def test_generate_writes_a_0600_private_key_and_prints_only_the_public_side(mint, tmp_path):
    r = mint("key", "generate", "--out", tmp_path / "k")
    assert r.code == 0, r
    private, public = tmp_path / "k" / "signing.key", tmp_path / "k" / "signing.pub"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in private.read_bytes() and "PRIVATE KEY" not in r.out + r.err
    fingerprint = hashlib.sha256(public.read_bytes()).hexdigest()
    assert str(public) in r.out and fingerprint in r.out
    again = mint("key", "generate", "--out", tmp_path / "k")  # never over an existing key
    one_line_error(again, "already")
    assert b"PRIVATE KEY" in private.read_bytes() and again.err.count("PRIVATE") == 0


def test_a_password_protected_key_signs_only_with_its_password(
    repo, mint, models, tmp_path, monkeypatch
):
    monkeypatch.setenv("KEY_PASSWORD", "correct horse")
    key = generate(mint, tmp_path / "k", "--password-env", "KEY_PASSWORD")
    assert key["encrypted"] and b"ENCRYPTED" in Path(key["private_key"]).read_bytes()
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    assert mint("key", "add", "ci", key["public_key"]).code == 0
    sign = ("commit", "chat", models["a1"], "-m", "one", "--sign", key["private_key"])
    monkeypatch.setenv("WRONG", "battery staple")
    refused(mint, repo, sign, "it is encrypted")
    refused(mint, repo, (*sign, "--password-env", "WRONG"), "password is wrong")
    one_line_error(mint(*sign, "--password-env", "UNSET_VARIABLE"), "not set", code=2)
    assert mint(*sign, "--password-env", "KEY_PASSWORD").code == 0
    assert "signed by ci" in mint("verify", "chat").out


def test_trusted_keys_are_added_listed_and_removed_by_name(repo, mint, tmp_path):
    alice, bob = generate(mint, tmp_path / "a"), generate(mint, tmp_path / "b")
    assert mint("key", "add", "alice", alice["public_key"]).code == 0
    assert mint("key", "add", "bob", bob["public_key"]).code == 0
    listed = mint("key", "ls", "--json").json()
    assert [(k["name"], k["fingerprint"]) for k in listed] == [
        ("alice", alice["fingerprint"]),
        ("bob", bob["fingerprint"]),
    ]
    refused(mint, repo, ("key", "add", "alice", bob["public_key"]), "name is taken")
    refused(mint, repo, ("key", "add", "carol", bob["public_key"]), "trusted as bob")
    line = one_line_error(mint("key", "add", "carol", alice["private_key"]), "private key")
    assert "BEGIN" not in line
    one_line_error(mint("key", "add", "carol", tmp_path / "a"), code=2)  # a folder
    assert mint("key", "rm", "bob").code == 0
    assert [k.name for k in api.key_ls(repo)] == ["alice"]
    one_line_error(mint("key", "rm", "alise"), "did you mean alice")


def test_a_folder_holding_a_private_key_is_never_committed(repo, mint, models, tmp_path):
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    folder = tmp_path / "adapter"
    shutil.copytree(models["a1"], folder)
    generate(mint, folder / "keys")
    refused(mint, repo, ("commit", "chat", folder, "-m", "x"), "keys/signing.key is a private")
    (folder / "keys" / "signing.key").rename(tmp_path / "elsewhere.key")
    assert mint("commit", "chat", folder, "-m", "x").code == 0
    assert "keys/signing.pub" in api.show(repo, "chat").files  # a public key is a file


# --- a mint checkout, verified by model_signing ------------------------------------------


def test_a_signed_checkout_verifies_with_model_signings_cli_and_library(
    repo, mint, signed, tmp_path
):
    checkout = tmp_path / "co"
    assert mint("checkout", "chat", checkout).code == 0
    assert (checkout / "model.sig").is_file()
    assert sorted(p.name for p in checkout.iterdir()) == sorted(
        [*api.show(repo, "chat").files, "model.sig"]
    )
    cli = model_signing_cli(
        "verify",
        "key",
        checkout,
        "--signature",
        checkout / "model.sig",
        "--public_key",
        signed["public_key"],
    )
    assert cli.returncode == 0 and "Verification succeeded" in cli.stdout, cli
    verifier = verifying.Config().use_elliptic_key_verifier(public_key=signed["public_key"])
    verifier.verify(checkout, checkout / "model.sig")  # raises if it does not verify
    cid = api.resolve(repo, "chat")
    r = mint("verify", "chat", "--json")
    assert r.code == 0, r
    assert r.json() == {
        "target": cid,
        "signers": [{"key": "alice", "fingerprint": signed["fingerprint"], "bound": True}],
        "members": [],
    }
    assert "commit signed by alice" in mint("verify", "--dir", checkout).out


def test_the_signature_lists_the_blob_ids_and_ignores_model_sig(repo, mint, signed, tmp_path):
    bundle = json.loads(api.show(repo, "chat").signatures[0])
    import base64

    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    predicate = statement["predicate"]
    files = api.show(repo, "chat").files
    assert {r["name"]: r["digest"] for r in predicate["resources"]} == {
        p: f.sha256 for p, f in files.items()
    }
    assert "model.sig" in predicate["serialization"]["ignore_paths"]
    assert predicate["serialization"]["method"] == "files"
    assert predicate["mint"] == {"commit": api.resolve(repo, "chat")}
    assert bundle["verificationMaterial"]["publicKey"]["hint"] == signed["fingerprint"]
    assert bundle["verificationMaterial"]["tlogEntries"] == []  # offline: no transparency log


def test_signing_an_unchanged_folder_signs_the_head_once_per_key(repo, mint, signed, models):
    again = ("commit", "chat", models["a1"], "-m", "again", "--sign", signed["private_key"])
    r = mint(*again)
    # no new commit, and no new signature: alice signed this commit already, and the CLI
    # says "signed" only when a signature was kept (issue 35)
    assert r.code == 0 and "carries this key's signature already" in r.out, r
    assert len(api.show(repo, "chat").signatures) == 1
    bob = generate(mint, Path(signed["private_key"]).parent.parent / "bob")
    assert mint("key", "add", "bob", bob["public_key"]).code == 0
    r = mint(*again[:-1], bob["private_key"])
    assert r.code == 0 and r.out.startswith("signed chat's head "), r
    signers = api.verify(repo, "chat").signers
    assert sorted(s.key for s in signers) == ["alice", "bob"] and len(api.log(repo, "chat")) == 1


# --- a folder signed by model_signing, committed by mint -----------------------------------


def test_a_folder_signed_by_model_signings_cli_keeps_its_signature(repo, mint, models, tmp_path):
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    key = generate(mint, tmp_path / "k")
    folder = tmp_path / "folder"
    shutil.copytree(models["a1"], folder)
    sign = model_signing_cli(
        "sign", "key", folder, "--signature", folder / "model.sig", "--private_key",
        key["private_key"],
    )  # fmt: skip
    assert sign.returncode == 0, sign
    assert mint("commit", "chat", folder, "-m", "signed elsewhere").code == 0
    assert "model.sig" not in api.show(repo, "chat").files  # a signature, not a file
    one_line_error(mint("verify", "chat"), "not trusted here")
    assert mint("key", "add", "vendor", key["public_key"]).code == 0
    assert "files signed by vendor" in mint("verify", "chat").out
    checkout = tmp_path / "co"
    assert mint("checkout", "chat", checkout).code == 0
    assert (checkout / "model.sig").read_bytes() == (folder / "model.sig").read_bytes()
    verifier = verifying.Config().use_elliptic_key_verifier(public_key=key["public_key"])
    verifier.verify(checkout, checkout / "model.sig")


def test_a_signature_that_leaves_a_file_out_signs_no_folder_or_commit(
    repo, mint, models, tmp_path
):
    """model_signing's --ignore-paths leaves files out of a signature; mint signs every file
    of a commit, so such a bundle verifies no folder and is kept with no commit."""
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    key = generate(mint, tmp_path / "k")
    assert mint("key", "add", "vendor", key["public_key"]).code == 0
    folder = tmp_path / "folder"
    shutil.copytree(models["a1"], folder)
    sign = model_signing_cli(
        "sign", "key", folder, "--signature", folder / "model.sig", "--private_key",
        key["private_key"], "--ignore-paths", folder / "README.md",
    )  # fmt: skip
    assert sign.returncode == 0, sign
    one_line_error(mint("verify", "--dir", folder), "README.md is not signed")
    refused(mint, repo, ("commit", "chat", folder, "-m", "x"), "README.md is not signed")


def test_a_model_sig_of_other_files_is_refused_at_commit(repo, mint, signed, models, tmp_path):
    folder = tmp_path / "a2"
    shutil.copytree(models["a2"], folder)
    checkout = tmp_path / "co"
    assert mint("checkout", "chat", checkout).code == 0
    shutil.copy(checkout / "model.sig", folder / "model.sig")
    refused(mint, repo, ("commit", "chat", folder, "-m", "x"), "does not sign these files")
    # the same files on another line: a new commit, which chat's signature does not name
    refused(mint, repo, ("commit", "chat2", checkout, "-m", "x"), "made for commit")


# --- forgeries: each refused by mint verify in one line -----------------------------------


def test_a_changed_byte_or_a_swapped_file_in_a_checkout_is_refused(mint, signed, models, tmp_path):
    changed, swapped = tmp_path / "changed", tmp_path / "swapped"
    for folder in (changed, swapped):
        assert mint("checkout", "chat", folder).code == 0
    data = bytearray((changed / WEIGHTS).read_bytes())
    data[-1] ^= 0x01
    (changed / WEIGHTS).chmod(0o644)
    (changed / WEIGHTS).write_bytes(bytes(data))
    one_line_error(mint("verify", "--dir", changed), f"{WEIGHTS} differs")
    (swapped / WEIGHTS).chmod(0o644)
    shutil.copy(models["a2"] / WEIGHTS, swapped / WEIGHTS)
    one_line_error(mint("verify", "--dir", swapped), f"{WEIGHTS} differs")
    (swapped / "extra.txt").write_text("added")
    shutil.copy(models["a1"] / WEIGHTS, swapped / WEIGHTS)
    one_line_error(mint("verify", "--dir", swapped), "extra.txt is not signed")


def test_a_signature_by_an_untrusted_key_is_refused(repo, mint, models, tmp_path):
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    alice, mallory = generate(mint, tmp_path / "a"), generate(mint, tmp_path / "m")
    assert mint("key", "add", "alice", alice["public_key"]).code == 0
    assert (
        mint("commit", "chat", models["a1"], "-m", "x", "--sign", mallory["private_key"]).code == 0
    )
    line = one_line_error(mint("verify", "chat"), "not trusted here")
    assert mallory["fingerprint"][:16] in line
    one_line_error(mint("verify", "chat", "--key", "alice"), "not trusted here")
    r = mint("verify", "chat", "--public-key", mallory["public_key"])
    assert r.code == 0 and "signed by the given key" in r.out
    assert mint("key", "rm", "alice").code == 0
    one_line_error(mint("verify", "chat", "--key", "alice"), "no trusted key named")


def test_no_signature_at_all_is_one_line(mint, models):
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    assert mint("commit", "chat", models["a1"], "-m", "x").code == 0
    one_line_error(mint("verify", "chat"), "carries no signature")


def _forge(repo, rev: str, bundle: str) -> None:
    """What an attacker who writes the database directly would do: attach BUNDLE to REV."""
    with repo.db.write() as conn:
        conn.execute(
            schema.commit_signatures.insert().values(
                commit_id=api.resolve(repo, rev),
                sha256=hashlib.sha256(bundle.encode()).hexdigest(),
                bundle=bundle,
                key_hint=None,
                added_at=sa.func.now(),
            )
        )


def test_a_bundle_replayed_onto_another_commit_is_refused(repo, mint, signed, models):
    bundle = api.show(repo, "chat").signatures[0]
    assert mint("commit", "chat", models["a2"], "-m", "other files").code == 0
    _forge(repo, "chat", bundle)
    one_line_error(mint("verify", "chat"), f"{WEIGHTS} differs")
    # the same files, another commit (line chat2): the bundle names the commit it signed
    assert mint("commit", "chat2", models["a1"], "-m", "same files").code == 0
    _forge(repo, "chat2", bundle)
    one_line_error(mint("verify", "chat2"), "made for commit")
    assert mint("verify", "chat~1").code == 0  # the commit it was made for still verifies


def test_a_bundle_whose_signature_was_altered_is_refused(repo, mint, signed, models):
    bundle = json.loads(api.show(repo, "chat").signatures[0])
    sig = bundle["dsseEnvelope"]["signatures"][0]
    sig["sig"] = sig["sig"][:-8] + ("A" * 8 if not sig["sig"].endswith("A" * 8) else "B" * 8)
    assert mint("commit", "chat2", models["a1"], "-m", "same files").code == 0
    with repo.db.write() as conn:  # the payload names chat's commit: keep only the signature
        conn.execute(schema.commit_signatures.delete())
    _forge(repo, "chat", json.dumps(bundle))
    one_line_error(mint("verify", "chat"), "does not verify")


# --- signatures travel with their commits --------------------------------------------------


def test_signatures_are_sent_with_their_commits_and_checked_on_arrival(
    repo, mint, signed, tmp_path
):
    dst, _ = api.init(tmp_path / "dst")
    try:
        head = api.resolve(repo, "chat")
        with repo.db.read() as conn:
            ids = sending.reachable(conn, [head], [])
            payload = sending.export_objects(conn, ids)
        for blob in sending.blob_sizes(repo.db.engine.connect(), ids):
            with repo.store.open(blob) as f:
                dst.store.put_bytes(f.read())
        tampered = json.loads(json.dumps(payload))
        tampered["signatures"][0]["commit"] = "f" * 64
        before = snapshot(dst)
        with pytest.raises(Exception, match="not here"):
            receiving.import_objects(dst, tampered, pushed_by=None)
        assert snapshot(dst) == before
        receiving.import_objects(dst, payload, pushed_by=None)
        assert api.show(dst, head).signatures == api.show(repo, head).signatures
        api.key_add(dst, "alice", Path(signed["public_key"]).read_text(), by="x")
        assert [s.key for s in api.verify(dst, head).signers] == ["alice"]
    finally:
        dst.close()


def test_private_keys_never_enter_the_repository(repo, mint, signed):
    secret = Path(signed["private_key"]).read_bytes()
    with repo.db.read() as conn:
        everything = repr(snapshot(repo)) + repr(
            conn.execute(sa.select(schema.signing_keys)).all()
        )
    assert b"PRIVATE" not in everything.encode() and secret.decode() not in everything
    for blob in repo.store.iter():
        with repo.store.open(blob) as f:
            assert b"PRIVATE KEY" not in f.read()
    assert os.environ.get("MINT_DEBUG") is None


def test_a_signature_travels_through_a_registry(repo, mint, signed, models, tmp_path, monkeypatch):
    """Pushed with its commit, kept by the registry, written by a checkout through it, and
    cloned: the clone verifies it, and model_signing verifies the remote checkout."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    server, _ = api.init(tmp_path / "registry")
    api.base_add(server, "tiny-llama", models["base"])
    monkeypatch.setenv("MINT_TOKEN", create_token(server.root, "wanda", "writer"))
    with running_registry(server.root) as registry:
        assert mint("remote", "add", "origin", registry.url).code == 0
        assert mint("push", "origin", "chat").code == 0
        assert api.show(server, "chat").signatures == api.show(repo, "chat").signatures
        checkout = tmp_path / "remote-checkout"
        code, _, err = run_in_process(["--repo", registry.url, "checkout", "chat", str(checkout)])
        assert code == 0, err
        cli = model_signing_cli(
            "verify", "key", checkout, "--signature", checkout / "model.sig",
            "--public_key", signed["public_key"],
        )  # fmt: skip
        assert cli.returncode == 0, cli
        code, _, err = run_in_process(["clone", registry.url, str(tmp_path / "clone")])
        assert code == 0, err
    server.close()
    clone = api.open_repo(tmp_path / "clone")
    try:
        api.key_add(clone, "alice", Path(signed["public_key"]).read_text(), by="x")
        assert [(s.key, s.bound) for s in api.verify(clone, "chat").signers] == [("alice", True)]
    finally:
        clone.close()


def test_a_bad_signature_pushed_to_a_registry_is_refused_naming_its_commit(
    repo, mint, signed, models, tmp_path, monkeypatch
):
    """A bundle replayed onto another commit locally (the database written directly), then
    pushed: the registry refuses it in one line naming the commit it came with, keeps nothing."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert mint("commit", "chat2", models["a1"], "-m", "same files").code == 0
    _forge(repo, "chat2", api.show(repo, "chat").signatures[0])
    chat, chat2 = api.resolve(repo, "chat"), api.resolve(repo, "chat2")
    server, _ = api.init(tmp_path / "registry")
    api.base_add(server, "tiny-llama", models["base"])
    monkeypatch.setenv("MINT_TOKEN", create_token(server.root, "wanda", "writer"))
    with running_registry(server.root) as registry:
        assert mint("remote", "add", "origin", registry.url).code == 0
        before = snapshot(server)[1]  # the rows (blobs arrive first, named by no commit)
        said = f"signature for {chat2[:12]}: it was made for commit {chat[:12]}, not this one"
        one_line_error(mint("push", "origin", "chat2"), said)
        assert snapshot(server)[1] == before
        assert mint("push", "origin", "chat").code == 0  # the commit it was made for
    server.close()


def test_a_registrys_keys_are_an_admins_and_verify_runs_there(
    repo, mint, signed, models, tmp_path, monkeypatch
):
    """`mint --repo URL key add` needs an admin; a private key given by mistake is refused
    before anything is sent; `mint --repo URL verify` checks against the registry's keys."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    server, _ = api.init(tmp_path / "registry")
    api.base_add(server, "tiny-llama", models["base"])
    admin = create_token(server.root, "ada", "admin")
    writer = create_token(server.root, "wanda", "writer")
    with running_registry(server.root) as registry:

        def at(token: str, *args) -> Result:
            monkeypatch.setenv("MINT_TOKEN", token)
            return Result(*run_in_process(["--repo", registry.url, *map(str, args)]))

        one_line_error(at(writer, "key", "add", "alice", signed["public_key"]), "admin")
        one_line_error(at(admin, "key", "add", "alice", signed["private_key"]), "private key")
        assert at(admin, "key", "add", "alice", signed["public_key"]).code == 0
        listed = at(writer, "key", "ls", "--json").json()
        assert [(k["name"], k["fingerprint"], k["added_by"]) for k in listed] == [
            ("alice", signed["fingerprint"], "ada")
        ]
        monkeypatch.setenv("MINT_TOKEN", writer)
        assert mint("remote", "add", "origin", registry.url).code == 0
        assert mint("push", "origin", "chat").code == 0
        r = at(writer, "verify", "chat", "--json")
        assert r.code == 0, r
        assert [(s["key"], s["bound"]) for s in r.json()["signers"]] == [("alice", True)]
        assert at(admin, "key", "rm", "alice").code == 0
        one_line_error(at(writer, "verify", "chat"), "not trusted here")
    with server.db.read() as conn:
        stored = repr(conn.execute(sa.select(schema.signing_keys)).all())
    assert "PRIVATE" not in stored and "PRIVATE" not in (registry.output() or "")
    server.close()


# --- a bundle is outside input: anything that is not one is one error -----------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=20,
)


@settings(max_examples=int(os.environ.get("MINT_FUZZ_EXAMPLES", "60")), deadline=None)
@given(
    st.binary(max_size=300)
    | JSON.map(lambda v: json.dumps(v).encode())
    | st.dictionaries(
        st.sampled_from(["mediaType", "dsseEnvelope", "verificationMaterial"]), JSON
    ).map(lambda v: json.dumps(v).encode())
)
def test_reading_anything_but_a_bundle_is_one_error(data):
    try:
        read_bundle_bytes(data)
    except InvalidSignature as exc:
        assert "\n" not in str(exc)


# --- a configured default key, and an export's model.sig ---------------------------------


def test_a_configured_default_key_signs_when_sign_is_given_no_path(
    repo, mint, models, tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    alice = generate(mint, tmp_path / "alice")
    assert mint("key", "add", "alice", alice["public_key"]).code == 0
    commit = ("commit", "chat", models["a1"], "-m", "one", "--sign")
    refused(mint, repo, commit, "no default is set: mint config set signing.key PATH")
    one_line_error(mint("config", "set", "signing.key", alice["public_key"]), "a public key")
    one_line_error(mint("config", "set", "signing.colour", "x"), "no setting named")
    assert mint("config", "get", "signing.key").code == 1  # not set
    assert mint("config", "set", "signing.key", alice["private_key"]).code == 0
    kept = tmp_path / "config" / "mint" / "config.json"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert json.loads(kept.read_text()) == {"signing.key": alice["private_key"]}  # a path only
    assert mint("config", "get", "signing.key").out.strip() == alice["private_key"]

    r = mint(*commit)
    assert r.code == 0, r
    assert "commit signed by alice" in mint("verify", "chat").out
    other = generate(mint, tmp_path / "other")  # a path given still wins over the default
    r = mint("commit", "chat", models["a2"], "-m", "two", "--sign", other["private_key"])
    assert r.code == 0, r
    one_line_error(mint("verify", "chat"), "not trusted here")
    assert mint("config", "unset", "signing.key").code == 0
    refused(mint, repo, commit, "no default is set")


def test_every_sign_option_given_no_path_uses_the_configured_default_key(
    repo, mint, models, tmp_path, monkeypatch
):
    """set commit, set derive, promote and rollback take --sign without a path as commit does."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    alice, bob = generate(mint, tmp_path / "alice"), generate(mint, tmp_path / "bob")
    assert mint("key", "add", "alice", alice["public_key"]).code == 0
    ids = {}
    for line, model in (("router", "a1"), ("chat", "a2"), ("coding", "a3"), ("summary", "a1")):
        r = mint(
            "commit", line, models[model], "-m", line, "--json", "--sign", alice["private_key"]
        )
        assert r.code == 0, r
        ids[line] = r.json()["id"]
    folder = tmp_path / "macaron"
    folder.mkdir()
    (folder / "mol.toml").write_text(MACARON)
    (folder / "route.md").write_text("Route the request to one expert.\n")
    (folder / "summary.md").write_text("Summarise the turn.\n")
    assert mint("promote", ids["chat"], "--to", "production").code == 0
    r = mint("commit", "chat", models["a3"], "-m", "two", "--json", "--sign", alice["private_key"])
    assert r.code == 0, r
    assert mint("promote", "chat", "--to", "production").code == 0
    set_commit = ("set", "commit", folder / "mol.toml", "--sign", "--json")
    rollback = ("rollback", "chat@production", "--sign")
    promote = ("promote", r.json()["id"], "--to", "production", "--sign")
    for args in (set_commit, rollback, promote):
        refused(mint, repo, args, "no default is set: mint config set signing.key PATH")

    assert mint("config", "set", "signing.key", alice["private_key"]).code == 0
    made = mint(*set_commit)
    assert made.code == 0, made
    assert mint("verify", made.json()["id"]).out.startswith(
        f"{made.json()['id'][:12]}: set signed"
    )
    derive = ("set", "derive", "macaron", "--use", f"chat={ids['chat']}", "--json", "--sign")
    derived = mint(*derive)
    assert derived.code == 0, derived
    assert "set signed by alice" in mint("verify", derived.json()["id"]).out
    assert mint(*rollback).code == 0 and mint(*promote).code == 0
    history = mint("history", "chat@production", "--verify", "--json").json()
    assert [(i["state"], i["key"]) for i in history] == [
        ("unsigned", None),
        ("unsigned", None),
        ("valid", "alice"),
        ("valid", "alice"),
    ]
    # A path given still wins over the default: bob's key is not trusted here.
    refused(
        mint, repo, ("rollback", "chat@production", "--sign", bob["private_key"]), "not trusted"
    )
    assert mint("config", "unset", "signing.key").code == 0
    refused(mint, repo, ("set", "derive", *derive[2:]), "no default is set")


def test_an_export_of_a_signed_commit_writes_its_model_sig(repo, mint, signed, models, tmp_path):
    out = tmp_path / "peft"
    r = mint("export", "chat", out, "--json")
    assert r.code == 0, r
    assert r.json()["signatures"] == ["model.sig"]
    assert (out / "model.sig").read_text() == api.show(repo, "chat").signatures[0]
    assert verified_by_model_signing(out, signed["public_key"]).returncode == 0
    assert mint("export", "chat", tmp_path / "vllm", "--format", "vllm").code == 0
    assert (tmp_path / "vllm" / "model.sig").read_text() == (out / "model.sig").read_text()

    assert mint("commit", "plain", models["a2"], "-m", "unsigned").code == 0
    assert mint("export", "plain", tmp_path / "plain").code == 0
    assert not (tmp_path / "plain" / "model.sig").exists()
