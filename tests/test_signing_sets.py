"""Signed sets (issue 23): `mint set commit --sign` over the members' signatures and mol.toml,
`mint verify SET` recursively, a signed set's checkout verified by the unmodified
model_signing, forgeries refused in one line; and signing through a registry (`--repo URL
commit/set commit --sign`, `--repo URL verify --dir`), the private key never sent. SQLite and
PostgreSQL (`repo`, also as the registry's repository)."""

from __future__ import annotations

import base64
import hashlib
import json
import tomllib
from pathlib import Path

import pytest
import sqlalchemy as sa
from model_signing import verifying

from mint import api, schema
from mint.cli import run_in_process
from mint.errors import InvalidObject
from mint.exchange import receiving, sending
from mint.signing.bundle import sign
from mint.signing.commits import receive_signatures
from mint.signing.sets import set_files

from conftest import Result, one_line_error, refused, snapshot
from support.registry import create_token, running_registry
from support.signing import generate, verified_by_model_signing
from support.texts import MACARON

pytestmark = pytest.mark.one_database(
    "sqlite",
    "a set's signature is checked as a file; test_signing_trust stores signatures on both"
    " databases",
)


MEMBERS = {"router": "a1", "chat": "a2", "coding": "a3", "summary": "a1"}


def set_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "macaron"
    folder.mkdir()
    (folder / "mol.toml").write_text(MACARON)
    (folder / "route.md").write_text("Route the request to one expert.\n")
    (folder / "summary.md").write_text("Summarise the turn.\n")
    return folder


def commit_members(mint, models, key: dict | None, unsigned=()) -> dict[str, str]:
    """The four member lines of MACARON, each signed with KEY but those in UNSIGNED."""
    ids = {}
    for line, model in MEMBERS.items():
        signing = () if key is None or line in unsigned else ("--sign", key["private_key"])
        r = mint("commit", line, models[model], "-m", line, "--json", *signing)
        assert r.code == 0, r
        ids[line] = r.json()["id"]
    return ids


@pytest.fixture
def keys(mint, models, tmp_path):
    """Trusted keys alice and bob, the base registered."""
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    out = {}
    for name in ("alice", "bob"):
        out[name] = generate(mint, tmp_path / "keys" / name)
        assert mint("key", "add", name, out[name]["public_key"]).code == 0
    return out


@pytest.fixture
def signed_set(mint, models, keys, tmp_path):
    """MACARON's members signed by alice, and the set signed by alice: (set id, member ids)."""
    ids = commit_members(mint, models, keys["alice"])
    mol = set_folder(tmp_path) / "mol.toml"
    r = mint("set", "commit", mol, "--sign", keys["alice"]["private_key"], "--json")
    assert r.code == 0, r
    return r.json()["id"], ids


def statement(bundle: str) -> dict:
    return json.loads(base64.b64decode(json.loads(bundle)["dsseEnvelope"]["payload"]))


def drop_signatures(repo, cid: str) -> None:
    with repo.db.write() as conn:
        c = schema.commit_signatures.c
        conn.execute(schema.commit_signatures.delete().where(c.commit_id == cid))


def forge(repo, cid: str, bundle: str) -> None:
    """What an attacker who writes the database would do: attach BUNDLE to commit CID."""
    with repo.db.write() as conn:
        conn.execute(
            schema.commit_signatures.insert().values(
                commit_id=cid,
                sha256=hashlib.sha256(bundle.encode()).hexdigest(),
                bundle=bundle,
                key_hint=None,
                added_at=sa.func.now(),
            )
        )


# --- signing and verifying a set ---------------------------------------------------------


def test_a_set_is_signed_over_its_mol_toml_and_its_members_signatures(
    repo, mint, keys, signed_set, tmp_path
):
    sid, ids = signed_set
    shown = api.show(repo, "macaron")
    assert shown.id == sid and len(shown.signatures) == 1
    st = statement(shown.signatures[0])
    stated = {r["name"]: r["digest"] for r in st["predicate"]["resources"]}
    assert st["predicate"]["mint"] == {"commit": sid}
    checkout = tmp_path / "co"
    assert mint("checkout", "macaron", checkout).code == 0
    mol = (checkout / "mol.toml").read_bytes()
    assert stated["mol.toml"] == hashlib.sha256(mol).hexdigest()
    assert tomllib.loads(mol.decode())["experts"] == {"chat": ids["chat"], "coding": ids["coding"]}
    for folder, line in (("router", "router"), ("chat", "chat"), ("summary", "summary")):
        member_bundle = api.show(repo, ids[line]).signatures[0]
        assert stated[f"{folder}/model.sig"] == hashlib.sha256(member_bundle.encode()).hexdigest()
        assert (checkout / folder / "model.sig").read_text() == member_bundle
    on_disk = {str(p.relative_to(checkout)) for p in checkout.rglob("*") if p.is_file()} - {
        "model.sig"
    }
    assert set(stated) == on_disk  # every file of the checkout, members' signatures too

    r = mint("verify", "macaron")
    assert r.code == 0, r
    lines = r.out.splitlines()
    assert lines[0] == f"{sid[:12]}: set signed by alice ({keys['alice']['fingerprint']})"
    assert [line.split()[0] for line in lines[1:]] == ["router", "chat", "coding", "summary"]
    assert all("commit signed by alice" in line for line in lines[1:])
    members = mint("verify", "macaron", "--json").json()["members"]
    assert {m["label"]: m["commit"] for m in members} == ids
    one_line_error(mint("verify", "macaron", "--key", "bob"), "not trusted here")

    # the unmodified model_signing accepts the set's folder and each member's
    cli = verified_by_model_signing(checkout, keys["alice"]["public_key"])
    assert cli.returncode == 0 and "Verification succeeded" in cli.stdout, cli
    assert (
        verified_by_model_signing(checkout / "coding", keys["alice"]["public_key"]).returncode == 0
    )
    verifier = verifying.Config().use_elliptic_key_verifier(public_key=keys["alice"]["public_key"])
    verifier.verify(checkout, checkout / "model.sig")
    r = mint("verify", "--dir", checkout)
    assert r.code == 0, r
    assert "set signed by alice" in r.out and len(r.out.splitlines()) == 5


def test_a_set_whose_members_are_not_all_signed_is_not_signed(repo, mint, models, keys, tmp_path):
    commit_members(mint, models, keys["alice"], unsigned=("coding", "summary"))
    mol = set_folder(tmp_path) / "mol.toml"
    sign = ("set", "commit", mol, "--sign", keys["alice"]["private_key"])
    line = one_line_error(mint(*sign), "these members are not signed")
    assert "coding" in line and "summary" in line and "chat" not in line
    refused(mint, repo, sign, "not signed")
    # signed by a key this repository does not trust: refused too, with the reason
    mallory = generate(mint, tmp_path / "mallory")
    for line in ("coding", "summary"):
        r = mint(
            "commit", line, models[MEMBERS[line]], "-m", "x", "--sign", mallory["private_key"]
        )
        assert r.code == 0, r
    refused(mint, repo, sign, "which is not trusted here")
    assert mint("set", "commit", mol).code == 0  # unsigned, a set is still committed
    one_line_error(mint("verify", "macaron"), "carries no signature")
    # trusting mallory, the head (unchanged) is signed, and verifies
    assert mint("key", "add", "mallory", mallory["public_key"]).code == 0
    r = mint(*sign)
    assert r.code == 0 and r.out.startswith("signed macaron's head "), r
    assert mint("verify", "macaron").code == 0


def test_a_set_signature_checks_members_when_verified(repo, mint, models, keys, tmp_path):
    """A member signed by bob, who is trusted when the set is signed and removed later: the
    set's own signature verifies; its member's does not, and `verify` says which."""
    ids = commit_members(mint, models, keys["alice"], unsigned=("chat",))
    by_bob = ("commit", "chat", models["a2"], "-m", "x", "--sign", keys["bob"]["private_key"])
    assert mint(*by_bob).code == 0
    mol = set_folder(tmp_path) / "mol.toml"
    assert mint("set", "commit", mol, "--sign", keys["alice"]["private_key"]).code == 0
    assert mint("key", "rm", "bob").code == 0
    line = one_line_error(mint("verify", "macaron"), f"member chat ({ids['chat'][:12]})")
    assert "not trusted here" in line


# --- forgeries ------------------------------------------------------------------------------


def test_a_set_signature_replayed_onto_another_set_is_refused(
    repo, mint, models, keys, signed_set, tmp_path
):
    """Onto a set with another prompt: its files differ. Onto a later commit of the same
    content (the prompt changed, then changed back): it names the commit it was made for."""
    sid, _ = signed_set
    bundle = api.show(repo, sid).signatures[0]
    folder = tmp_path / "macaron"
    route = (folder / "route.md").read_text()
    (folder / "route.md").write_text("Route it elsewhere.\n")
    other = mint("set", "commit", folder / "mol.toml", "--json").json()["id"]
    (folder / "route.md").write_text(route)
    same = mint("set", "commit", folder / "mol.toml", "--json").json()["id"]
    assert len({sid, other, same}) == 3
    forge(repo, other, bundle)
    one_line_error(mint("verify", other), "route.md differs from the signed one")
    forge(repo, same, bundle)
    one_line_error(mint("verify", same), f"made for commit {sid[:12]}, not this one")
    assert mint("verify", sid).code == 0  # the set it was made for still verifies
    for cid, why in ((other, "route.md differs"), (same, "made for commit")):  # on arrival
        with repo.db.read() as conn:
            payload = sending.export_objects(conn, [cid])
        drop_signatures(repo, cid)
        before = snapshot(repo)
        said = f"^signature for {cid[:12]}: .*{why}"  # the commit it was sent for
        with pytest.raises(InvalidObject, match=said), repo.db.write() as conn:
            receive_signatures(conn, payload, receiving.LOCAL, [])
        assert snapshot(repo) == before


def test_a_set_naming_a_member_signature_that_is_not_there_is_refused(
    repo, mint, keys, signed_set
):
    """A set signature by a trusted key whose member signature digest is not one the member
    carries (a member's signature swapped): refused, and by the receiving side too."""
    sid, _ = signed_set
    detail = api.show(repo, sid)
    members = [api.show(repo, m.commit_id) for m in detail.members]
    chat = members[1]  # router, chat, coding, summary
    stranger = sign(
        {p: f.sha256 for p, f in chat.files.items()}, "chat", chat.id, keys["alice"]["private_key"]
    ).decode()  # a valid signature of the member, never attached to it
    digests = [hashlib.sha256(m.signatures[0].encode()).hexdigest() for m in members]
    digests[1] = hashlib.sha256(stranger.encode()).hexdigest()
    files = set_files(detail, [m.files for m in members], digests)
    swapped = sign(files, "macaron", sid, keys["alice"]["private_key"]).decode()
    drop_signatures(repo, sid)
    forge(repo, sid, swapped)
    one_line_error(mint("verify", "macaron"), f"member chat ({chat.id[:12]}) carries no")
    with repo.db.read() as conn:
        payload = sending.export_objects(conn, [sid])
    drop_signatures(repo, sid)
    before = snapshot(repo)
    said = f"^signature for {sid[:12]}: .*carries no signature"
    with pytest.raises(InvalidObject, match=said), repo.db.write() as conn:
        receive_signatures(conn, payload, receiving.LOCAL, [])
    assert snapshot(repo) == before


def test_a_changed_mol_toml_or_a_swapped_member_signature_in_a_checkout_is_refused(
    repo, mint, models, keys, signed_set, tmp_path
):
    sid, ids = signed_set
    changed, swapped = tmp_path / "changed", tmp_path / "swapped"
    for folder in (changed, swapped):
        assert mint("checkout", "macaron", folder).code == 0
    mol = changed / "mol.toml"
    mol.chmod(0o644)
    mol.write_text(mol.read_text().replace('default = "chat"', 'default = "coding"'))
    one_line_error(mint("verify", "--dir", changed), "mol.toml differs from the signed one")
    # chat signed again by bob (a valid signature): put in the checkout, it is not the one
    by_bob = ("commit", "chat", models["a2"], "-m", "x", "--sign", keys["bob"]["private_key"])
    assert mint(*by_bob).code == 0
    _, bobs = api.show(repo, ids["chat"]).signatures  # oldest first: alice's, then bob's
    sig = swapped / "chat" / "model.sig"
    sig.chmod(0o644)
    sig.write_text(bobs)
    one_line_error(mint("verify", "--dir", swapped), "chat/model.sig differs from the signed one")
    cli = verified_by_model_signing(swapped, keys["alice"]["public_key"])
    assert cli.returncode != 0


# --- through a registry ----------------------------------------------------------------------


def test_a_signed_set_travels_with_push_and_clone(repo, mint, models, keys, tmp_path, monkeypatch):
    """Members pushed unsigned, signed afterwards, then a signed set pushed: the push carries
    the members' signatures with the set's, the registry checks the set's on arrival, and a
    clone of it verifies the set and its members. The registry trusts alice: a commit already
    there takes only signatures by a key it trusts (issue 35: no writer grows another person's
    commit with signatures that prove nothing there)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    server, _ = api.init(tmp_path / "registry")
    api.base_add(server, "tiny-llama", Path(models["base"]))
    api.key_add(server, "alice", Path(keys["alice"]["public_key"]).read_text(), by="ada")
    monkeypatch.setenv("MINT_TOKEN", create_token(server.root, "wanda", "writer"))
    with running_registry(server.root) as registry:
        assert mint("remote", "add", "origin", registry.url).code == 0
        ids = commit_members(mint, models, None)
        assert mint("push", "origin", *MEMBERS).code == 0
        assert commit_members(mint, models, keys["alice"]) == ids  # the heads, signed now
        mol = set_folder(tmp_path) / "mol.toml"
        r = mint("set", "commit", mol, "--sign", keys["alice"]["private_key"], "--json")
        assert r.code == 0, r
        sid = r.json()["id"]
        r = mint("push", "origin", "macaron")
        assert r.code == 0, r
        for cid in (sid, *ids.values()):
            assert api.show(server, cid).signatures == api.show(repo, cid).signatures
        code, _, err = run_in_process(["clone", registry.url, str(tmp_path / "clone")])
        assert code == 0, err
    server.close()
    clone = api.open_repo(tmp_path / "clone")
    try:
        api.key_add(clone, "alice", Path(keys["alice"]["public_key"]).read_text(), by="x")
        v = api.verify(clone, "macaron")
        assert [s.key for s in v.signers] == ["alice"] and len(v.members) == 4
    finally:
        clone.close()


def test_signing_through_a_registry_keeps_the_key_on_this_machine(
    repo, mint, models, tmp_path, monkeypatch
):
    """`mint --repo URL commit --sign` and `set commit --sign` sign here and send the bundles;
    `--repo URL verify` and `verify --dir` check against the registry's keys. The registry's
    repository is `repo` (SQLite and PostgreSQL)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    api.base_add(repo, "tiny-llama", Path(models["base"]))
    alice = generate(mint, tmp_path / "alice")
    api.key_add(repo, "alice", Path(alice["public_key"]).read_text(), by="ada")
    writer = create_token(repo.root, "wanda", "writer")
    reader = create_token(repo.root, "rita", "reader")
    key = alice["private_key"]
    with running_registry(repo.root) as registry:

        def at(token: str, *args) -> Result:
            monkeypatch.setenv("MINT_TOKEN", token)
            return Result(*run_in_process(["--repo", registry.url, *map(str, args)]))

        for line, model in MEMBERS.items():
            r = at(writer, "commit", line, models[model], "-m", line, "--sign", key)
            assert r.code == 0, r
        assert [s.key for s in api.verify(repo, "chat").signers] == ["alice"]
        again = at(writer, "commit", "chat", models["a2"], "-m", "x", "--sign", key)
        # alice signed it already: said so, not "signed" (issue 35)
        assert again.code == 0 and "signature already" in again.out, again
        one_line_error(at(reader, "commit", "chat", models["a1"], "-m", "y", "--sign", key))
        mol = set_folder(tmp_path) / "mol.toml"
        r = at(writer, "set", "commit", mol, "--sign", key, "--json")
        assert r.code == 0, r
        sid = r.json()["id"]
        v = at(reader, "verify", "macaron", "--json")
        assert v.code == 0, v
        assert v.json()["target"] == sid and len(v.json()["members"]) == 4
        checkout = tmp_path / "co"
        assert at(reader, "checkout", "macaron", checkout).code == 0
        r = at(reader, "verify", "--dir", checkout)
        assert r.code == 0 and "set signed by alice" in r.out, r
        assert at(reader, "verify", "--dir", checkout / "chat").code == 0
        one_line_error(at(reader, "verify", "--dir", checkout, "--key", "alise"), "did you mean")
        (checkout / "route.md").chmod(0o644)
        (checkout / "route.md").write_text("Route it elsewhere.\n")
        one_line_error(at(reader, "verify", "--dir", checkout), "route.md differs")
        assert at(writer, "key", "ls").code == 0
    secret = Path(alice["private_key"]).read_text()
    everything = repr(snapshot(repo))
    assert "PRIVATE" not in everything and secret not in everything
    assert "PRIVATE" not in (registry.output() or "")
