"""`mint pull hf://...` of a hub repository signed in the OpenSSF model-signing format
(issue 23): its `model.sig` is kept as the commit's signature (checked first: exactly the files
pulled), and `--verify-signature` refuses, before anything is stored, a repository whose
signature is missing or does not verify.

The hub is a real olah serving git repos; the signatures are made by the unmodified
`model_signing` CLI (a process). SQLite and PostgreSQL (`repo`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from mint import api
from mint.signing.bundle import sign

from conftest import one_line_error, refused
from support.hubserver import HubServer
from support.signing import model_signing_cli, verified_by_model_signing

pytestmark = pytest.mark.one_database(
    "sqlite",
    "the hub's signature is checked as a file; test_signing_trust stores signatures on both"
    " databases",
)


WEIGHTS = "adapter_model.safetensors"


def _signed_folder(src: Path, dest: Path, key: Path, extra: dict | None = None) -> Path:
    """SRC's adapter files, a README (and EXTRA files), signed by `model_signing sign key`."""
    shutil.copytree(src, dest)
    (dest / "README.md").write_text("# signed on the hub\n")
    for name, text in (extra or {}).items():
        (dest / name).write_text(text)
    r = model_signing_cli(
        "sign", "key", dest, "--signature", dest / "model.sig", "--private_key", key
    )
    assert r.returncode == 0, r.stderr
    return dest


@pytest.fixture(scope="session")
def signed_hub(tmp_path_factory, models):
    """olah serving org/signed (signed by alice with model_signing's CLI), org/forged (a byte
    of its weights changed after signing), org/badsig (a byte of its signature changed),
    org/extra (signs a file mint does not pull), org/minted (a mint checkout's model.sig, which
    names its commit) and org/unsigned. Yields (server, alice's
    key pair)."""
    root = tmp_path_factory.mktemp("signed-hub")
    alice = api.key_generate(root / "alice")
    key = Path(alice.private_key)
    server = HubServer(root / "hub")
    signed = _signed_folder(models["a1"], root / "signed", key)
    server.repo("org/signed").commit({"": signed}, "signed")

    forged = root / "forged"
    shutil.copytree(signed, forged)
    data = bytearray((forged / WEIGHTS).read_bytes())
    data[len(data) // 2] ^= 0x01
    (forged / WEIGHTS).write_bytes(bytes(data))
    server.repo("org/forged").commit({"": forged}, "forged")

    badsig = root / "badsig"
    shutil.copytree(signed, badsig)
    bundle = json.loads((badsig / "model.sig").read_text())
    sig = bytearray(base64.b64decode(bundle["dsseEnvelope"]["signatures"][0]["sig"]))
    sig[-1] ^= 0x01
    bundle["dsseEnvelope"]["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    (badsig / "model.sig").write_text(json.dumps(bundle))
    server.repo("org/badsig").commit({"": badsig}, "bad signature")

    extra = _signed_folder(models["a1"], root / "extra", key, {"notes.txt": "not pulled\n"})
    server.repo("org/extra").commit({"": extra}, "signs more")

    server.repo("org/unsigned").commit({"": models["a1"], "README.md": "# unsigned\n"}, "x")

    minted = root / "minted"  # a mint checkout's model.sig: it names the mint commit
    shutil.copytree(models["a1"], minted)
    digests = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in minted.iterdir()}
    (minted / "model.sig").write_bytes(sign(digests, "minted", "3f2a" * 16, key))
    server.repo("org/minted").commit({"": minted}, "a mint checkout")
    server.start("org/signed")
    yield server, alice
    server.stop()


@pytest.fixture
def based(mint, models, monkeypatch, tmp_path, signed_hub):
    """The `mint` runner on a repo with the tiny base, the signed hub in the environment."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", signed_hub[0].endpoint)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HF_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    return mint


def test_a_repo_signed_by_model_signing_arrives_with_its_signature(
    based, repo, signed_hub, tmp_path
):
    _, alice = signed_hub
    r = based("pull", "hf://org/signed")
    assert r.code == 0, r
    assert "signed: its model.sig is kept" in r.out
    detail = api.show(repo, "signed")
    assert "model.sig" not in detail.files  # a signature, not a file
    assert sorted(detail.files) == ["README.md", "adapter_config.json", WEIGHTS]
    assert len(detail.signatures) == 1

    unverified = based("verify", "signed")  # no key trusted yet
    one_line_error(unverified, "not trusted here")
    assert based("key", "add", "alice", alice.public_key).code == 0
    v = based("verify", "signed")
    assert v.code == 0, v
    assert "files signed by alice" in v.out

    # the checkout carries it, and the unmodified model_signing accepts the checkout
    assert based("checkout", "signed", tmp_path / "co").code == 0
    assert verified_by_model_signing(tmp_path / "co", alice.public_key).returncode == 0

    # pulled again with --verify-signature: what is held is verified as a commit is
    again = based("pull", "hf://org/signed", "--verify-signature", "--key", "alice")
    assert again.code == 0, again
    assert "already in the store" in again.out


def test_verify_signature_with_a_trusted_or_a_given_key(based, repo, signed_hub):
    _, alice = signed_hub
    given = based(
        "pull", "hf://org/signed", "--verify-signature", "--public-key", alice.public_key
    )
    assert given.code == 0, given
    assert f"signed by the key given ({alice.fingerprint[:16]}" in given.out
    assert len(api.show(repo, "signed").signatures) == 1

    assert based("key", "add", "alice", alice.public_key).code == 0
    j = based("pull", "hf://org/unsigned", "--verify-signature", "--json")  # refused: unsigned
    one_line_error(j, "hf://org/unsigned@main is not verified: it carries no signature")


def test_forged_repos_are_refused_in_one_line_and_nothing_is_stored(
    based, repo, signed_hub, tmp_path
):
    _, alice = signed_hub
    bob = api.key_generate(tmp_path / "bob")
    assert based("key", "add", "bob", bob.public_key).code == 0
    # a byte of the weights changed after signing: refused whether or not verification is asked
    differs = f"{WEIGHTS} differs from the signed one"
    refused(based, repo, ["pull", "hf://org/forged"], differs)
    refused(based, repo, ["pull", "hf://org/forged", "--verify-signature"], differs)
    # a signature over a file mint does not pull signs no commit
    refused(based, repo, ["pull", "hf://org/extra"], "notes.txt is signed but not pulled")
    # a mint checkout's model.sig names its commit, not the one a pull makes
    refused(based, repo, ["pull", "hf://org/minted"], "it was made for mint commit 3f2a3f2a3f2a")
    # signed by alice, whom this repository does not trust
    refused(
        based,
        repo,
        ["pull", "hf://org/signed", "--verify-signature"],
        f"is signed by key {alice.fingerprint[:16]}, not by a key trusted here (bob)",
    )
    refused(
        based,
        repo,
        ["pull", "hf://org/signed", "--verify-signature", "--public-key", bob.public_key],
        "not by the key given",
    )
    # a byte of the signature changed
    bad = ["pull", "hf://org/badsig", "--verify-signature", "--public-key", alice.public_key]
    refused(based, repo, bad, "its signature does not verify with the key it names")


def test_a_model_sig_naming_a_trusted_key_that_does_not_verify_is_refused_at_pull(
    based, repo, signed_hub
):
    """Issue 35: a signature is kept only when it proves something. org/badsig names alice's
    key and does not verify with it: in a repository that trusts alice it is refused at pull,
    verification asked or not, with nothing stored; org/signed is kept."""
    _, alice = signed_hub
    assert based("key", "add", "alice", alice.public_key).code == 0
    why = "it names trusted key alice"
    refused(based, repo, ["pull", "hf://org/badsig"], why)
    assert based("pull", "hf://org/signed").code == 0
    assert [s.key for s in api.verify(repo, "signed").signers] == ["alice"]
    assert api.fsck(repo).ok


def test_an_unsigned_repo_is_refused_only_when_verification_is_asked(based, repo, signed_hub):
    _, alice = signed_hub
    asked = ["pull", "hf://org/unsigned", "--verify-signature", "--public-key", alice.public_key]
    refused(based, repo, asked, "it carries no signature (no model.sig)")
    usage = based("pull", "hf://org/unsigned", "--key", "alice")
    assert usage.code != 0 and "--verify-signature" in usage.err
    r = based("pull", "hf://org/unsigned")
    assert r.code == 0, r
    assert "model.sig" not in r.out
    assert api.show(repo, "unsigned").signatures == []
