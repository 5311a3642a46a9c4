"""mint makes and checks model-signing bundles with cryptography alone (issue 23): these tests
hold that format to the unmodified model_signing library, both ways. A bundle mint makes is
the one model_signing's key signer makes for the same files (field for field, byte for byte
but for the ECDSA signature, which differs each time it is made, and the order of the
predicate's keys, which model_signing's protobuf Struct changes from one process to the next);
model_signing's verifier accepts it; and each bundle model_signing's verifier refuses, mint's
refuses too.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from pathlib import Path, PurePosixPath

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from model_signing import manifest
from model_signing._hashing import hashing as digests
from model_signing._signing import sign_ec_key, sign_sigstore_pb, signing

from mint import api
from mint.signing.bundle import IGNORED, PAYLOAD_TYPE, pae, sign, statement, verify_with
from mint.signing.keys import fingerprint

FILES = {  # orders that differ by path and by string, and a name that is not ASCII
    "b/x.txt": "1" * 64,
    "b.txt": "2" * 64,
    "adapter_config.json": "3" * 64,
    "adapter_model.safetensors": "4" * 64,
    "données/é.txt": "5" * 64,
}


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("format-keys")
    return api.key_generate(root / "alice"), api.key_generate(root / "bob")


def _theirs(files: dict, name: str, key: Path) -> bytes:
    """The bundle model_signing's key signer makes for FILES in a folder NAME."""
    items = [
        manifest.FileManifestItem(
            path=PurePosixPath(p), digest=digests.Digest("sha256", bytes.fromhex(d))
        )
        for p, d in files.items()
    ]
    serialization = manifest._FileSerialization("sha256", False, IGNORED)
    payload = signing.Payload(manifest.Manifest(name, items, serialization))
    return sign_ec_key.Signer(key).sign(payload).bundle.to_json().encode()


def _ordered_like(value, template):
    """VALUE with its objects' keys in TEMPLATE's order (same keys), recursively."""
    if isinstance(value, dict) and isinstance(template, dict) and set(value) == set(template):
        return {k: _ordered_like(value[k], template[k]) for k in template}
    if isinstance(value, list) and isinstance(template, list):
        return [_ordered_like(v, t) for v, t in zip(value, template, strict=True)]
    return value


def _payload(bundle: bytes) -> bytes:
    return base64.b64decode(json.loads(bundle)["dsseEnvelope"]["payload"])


def _verified_by_model_signing(bundle: bytes, public_key: str, tmp_path: Path) -> dict:
    (tmp_path / "model.sig").write_bytes(bundle)
    signature = sign_sigstore_pb.Signature.read(tmp_path / "model.sig")
    found = sign_ec_key.Verifier(Path(public_key)).verify(signature)
    return {r.identifier: r.digest.digest_hex for r in found.resource_descriptors()}


def test_mint_writes_the_bundle_model_signings_key_signer_writes(keys, tmp_path):
    alice, _ = keys
    mine = sign(FILES, "chat", None, alice.private_key)
    theirs = _theirs(FILES, "chat", Path(alice.private_key))
    # the statement: the same bytes once model_signing's keys are put in mint's order
    ours = _payload(mine)
    reordered = _ordered_like(json.loads(_payload(theirs)), json.loads(ours))
    assert ours == json.dumps(reordered, indent=2).encode()
    assert ours == statement(FILES, "chat")
    # the bundle around it: the same bytes but for the payload and the signature
    outer = [json.loads(b) for b in (mine, theirs)]
    for o in outer:
        o["dsseEnvelope"]["payload"] = o["dsseEnvelope"]["signatures"][0]["sig"] = ""
    assert outer[0] == outer[1]
    assert json.dumps(outer[0], separators=(",", ":")).encode() == _blanked(theirs)
    assert outer[0]["verificationMaterial"]["publicKey"]["hint"] == alice.fingerprint
    # each verifies the other's
    assert _verified_by_model_signing(mine, alice.public_key, tmp_path) == FILES
    pem = Path(alice.public_key).read_bytes()
    assert verify_with(theirs, pem) == FILES
    # a commit named in the predicate is ignored by model_signing (v1.0 lets a predicate grow)
    bound = sign(FILES, "chat", "c" * 64, alice.private_key)
    assert _verified_by_model_signing(bound, alice.public_key, tmp_path) == FILES


def _blanked(bundle: bytes) -> bytes:
    """BUNDLE's bytes with its payload and signature emptied, as they are."""
    o = json.loads(bundle)
    payload, sig = o["dsseEnvelope"]["payload"], o["dsseEnvelope"]["signatures"][0]["sig"]
    return bundle.replace(payload.encode(), b"", 1).replace(sig.encode(), b"", 1)


def _signed(st: dict, private_key: str, payload_type=PAYLOAD_TYPE, hint=None) -> bytes:
    """A bundle of statement ST, truly signed with PRIVATE_KEY (a well-made bundle of a
    statement model_signing may refuse)."""
    from cryptography.hazmat.primitives import hashes, serialization

    key = serialization.load_pem_private_key(Path(private_key).read_bytes(), None)
    payload = json.dumps(st, indent=2).encode()
    pae_bytes = b"DSSEv1 %d %s %d " % (len(payload_type), payload_type.encode(), len(payload))
    sig = key.sign(pae_bytes + payload, ec.ECDSA(hashes.SHA256()))
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return json.dumps(
        {
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": {
                "publicKey": {"hint": hint or fingerprint(public)},
                "tlogEntries": [],
            },
            "dsseEnvelope": {
                "payload": base64.b64encode(payload).decode(),
                "payloadType": payload_type,
                "signatures": [{"sig": base64.b64encode(sig).decode(), "keyid": ""}],
            },
        }
    ).encode()


def _changed(field: str):
    st = json.loads(statement(FILES, "chat"))
    if field == "type":
        st["_type"] = "https://in-toto.io/Statement/v0.1"
    elif field == "predicate":
        st["predicateType"] = "https://example.com/other/v1"
    elif field == "subjects":
        st["subject"].append(copy.deepcopy(st["subject"][0]))
    elif field == "resource":
        st["predicate"]["resources"][0]["digest"] = "6" * 64  # no longer hashes to the subject
    elif field == "serialization":
        del st["predicate"]["serialization"]["allow_symlinks"]
    return st


@pytest.mark.parametrize(
    "forgery",
    ["type", "predicate", "subjects", "resource", "serialization", "payload type", "other key"],
)
def test_what_model_signings_verifier_refuses_mint_refuses(keys, tmp_path, forgery):
    alice, bob = keys
    st = json.loads(statement(FILES, "chat"))
    if forgery == "payload type":
        bundle = _signed(st, alice.private_key, payload_type="application/json")
    elif forgery == "other key":  # signed by bob, naming alice's key
        bundle = _signed(st, bob.private_key, hint=alice.fingerprint)
    else:
        bundle = _signed(_changed(forgery), alice.private_key)
    with pytest.raises(Exception):  # noqa: B017 - model_signing raises several kinds
        _verified_by_model_signing(bundle, alice.public_key, tmp_path)
    with pytest.raises(ValueError):
        verify_with(bundle, Path(alice.public_key).read_bytes())
    # the same statement, unchanged and signed the same way, is accepted by both
    good = _signed(st, alice.private_key)
    assert _verified_by_model_signing(good, alice.public_key, tmp_path) == FILES
    assert verify_with(good, Path(alice.public_key).read_bytes()) == FILES


def test_the_statement_digest_is_model_signings(keys):
    st = json.loads(statement(FILES, "chat"))
    names = [r["name"] for r in st["predicate"]["resources"]]
    assert names == sorted(FILES, key=PurePosixPath)  # by path component, as model_signing
    root = hashlib.sha256(b"".join(bytes.fromhex(FILES[n]) for n in names)).hexdigest()
    assert st["subject"] == [{"name": "chat", "digest": {"sha256": root}}]
    assert pae(b"{}") == b"DSSEv1 28 application/vnd.in-toto+json 2 {}"


def test_a_folder_is_hashed_as_model_signing_hashes_it(tmp_path):
    from model_signing import hashing

    from mint.signing.bundle import folder_digests

    folder = tmp_path / "chat"
    for rel, text in {
        "adapter_config.json": "{}",
        "b.txt": "b",
        "b/x.txt": "x",
        ".hidden": "a dotfile is a file",
        "member/model.sig": "only the top model.sig is left out",
        "member/.gitignore": "and only the top git files",
        "model.sig": "left out",
        ".gitattributes": "left out",
        ".git/HEAD": "left out",
        ".github/workflows/ci.yml": "left out",
    }.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    (folder / "empty").mkdir()

    def theirs() -> dict:
        found = hashing.Config().set_ignored_paths(paths=IGNORED).hash(folder)
        return {r.identifier: r.digest.digest_hex for r in found.resource_descriptors()}

    assert folder_digests(folder) == theirs()
    assert "member/model.sig" in theirs() and ".hidden" in theirs()
    (folder / "link.txt").symlink_to(folder / "b.txt")  # a symbolic link: both refuse
    with pytest.raises(ValueError):
        theirs()
    with pytest.raises(ValueError, match="link.txt is a symbolic link"):
        folder_digests(folder)
