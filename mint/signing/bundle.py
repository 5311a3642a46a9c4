"""The OpenSSF model-signing format, as model_signing 1.1 writes and reads it.

A bundle is a Sigstore bundle (JSON) holding a DSSE envelope holding an in-toto statement:
its predicate lists every file with its sha256 (`resources`) and how the folder was
serialized (`serialization`: by file, sha256, no symlinks, `model.sig` and git's files
ignored: `model_signing sign`'s defaults). mint builds that manifest from a commit's blob ids,
which are the files' sha256, so signing reads no file again; model_signing's key signer
signs it. A bundle mint makes also names the commit in its predicate (`mint.commit`), which
v1.0 verifiers ignore and `mint verify` checks, so it cannot be replayed onto another commit
with the same files.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import SimpleNamespace

from mint.errors import InvalidKey, InvalidSignature, SigningUnavailable
from mint.signing import SIGNATURE_FILE

MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"
# What `model_signing sign DIR --signature DIR/model.sig` ignores (it lists them in set order;
# a verifier reads them as a set), sorted so that a bundle's bytes do not depend on a hash seed.
IGNORED = sorted([SIGNATURE_FILE, ".git", ".gitattributes", ".github", ".gitignore"])
MAX_BUNDLE = 1024 * 1024
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Statement:
    """What a bundle says, read without checking its signature."""

    files: dict[str, str]  # path -> sha256
    ignored: list[str]
    commit: str | None  # the commit a mint-made bundle names
    hint: str | None  # the fingerprint of the key that claims to have signed it


def model_signing():
    """model_signing's modules that mint uses (imported on first use: it loads sigstore)."""
    try:
        from model_signing import hashing, manifest
        from model_signing._hashing import hashing as digests
        from model_signing._signing import sign_ec_key, sign_sigstore_pb, signing
    except ImportError:
        raise SigningUnavailable("signing needs the model-signing package") from None
    return SimpleNamespace(
        hashing=hashing,
        manifest=manifest,
        digests=digests,
        sign_ec_key=sign_ec_key,
        bundle_file=sign_sigstore_pb,
        signing=signing,
    )


def sign(
    files: dict[str, str],
    name: str,
    commit: str | None,
    private_key: str | os.PathLike,
    password: str | None = None,
) -> bytes:
    """The bundle of FILES (path -> sha256) signed with the key in file PRIVATE_KEY, as
    `model_signing sign key` makes it for a folder NAME holding them; COMMIT, if given, named
    in the predicate."""
    ms = model_signing()
    items = [
        ms.manifest.FileManifestItem(
            path=PurePosixPath(p), digest=ms.digests.Digest("sha256", bytes.fromhex(d))
        )
        for p, d in files.items()
    ]
    serialization = ms.manifest._FileSerialization("sha256", False, IGNORED)
    payload = ms.signing.Payload(ms.manifest.Manifest(name, items, serialization))
    if commit is not None:
        payload.statement.pb.predicate.update({"mint": {"commit": commit}})
    signer = load_signer(private_key, password)
    return signer.sign(payload).bundle.to_json().encode()


def load_signer(private_key: str | os.PathLike, password: str | None = None):
    """model_signing's key signer for the key in file PRIVATE_KEY."""
    ms, path = model_signing(), Path(private_key)
    with _key_errors(path, password):
        return ms.sign_ec_key.Signer(path, password.encode() if password else None)


def check_private_key(private_key: str | os.PathLike, password: str | None = None) -> None:
    """Load the key as the signer will, with cryptography alone, so that a wrong key or
    password fails before anything is stored; and import model_signing (which loads
    sigstore: about a second) in a thread meanwhile, while the commit hashes its files."""
    from mint.signing.keys import CURVES, crypto

    serialization, ec = crypto()
    path = Path(private_key)
    with _key_errors(path, password):
        key = serialization.load_pem_private_key(
            path.read_bytes(), password.encode() if password else None
        )
        if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name not in CURVES:
            raise ValueError("not an elliptic-curve key")
    threading.Thread(target=_import_quietly, name="mint-import-model-signing").start()


def _import_quietly() -> None:
    with contextlib.suppress(SigningUnavailable):
        model_signing()


@contextlib.contextmanager
def _key_errors(path: Path, password: str | None):
    """A key that cannot be loaded as one line that never quotes the key."""
    try:
        yield
    except OSError as exc:
        raise InvalidKey(str(path), exc.strerror or "cannot be read") from None
    except TypeError:
        why = "it is not encrypted: give no password" if password else "it is encrypted"
        raise InvalidKey(str(path), why) from None
    except ValueError:
        why = "the password is wrong, or it is" if password else "it is"
        raise InvalidKey(str(path), f"{why} not an elliptic-curve private key (PEM)") from None
    except Exception:  # noqa: BLE001 - cryptography's UnsupportedAlgorithm and kin
        raise InvalidKey(str(path), "not an elliptic-curve private key (PEM)") from None


def read_bundle(path: Path) -> bytes:
    """The bytes of the bundle file PATH, at most one more than `read` accepts."""
    with open(path, "rb") as f:
        return f.read(MAX_BUNDLE + 1)


def read(bundle: bytes, where: str = SIGNATURE_FILE) -> Statement:
    """What BUNDLE states, its shape checked as model_signing's verifier reads it (its
    signature is not checked here: `verify_with` does that)."""
    if len(bundle) > MAX_BUNDLE:
        raise InvalidSignature(where, f"larger than {MAX_BUNDLE} bytes")
    try:
        outer = json.loads(bundle.decode("utf-8"))  # UTF-8 only: it is kept as text
        envelope = outer["dsseEnvelope"]
        if outer["mediaType"] != MEDIA_TYPE or envelope["payloadType"] != PAYLOAD_TYPE:
            raise ValueError("not a model-signing bundle (media or payload type)")
        statement = json.loads(base64.b64decode(envelope["payload"], validate=True))
        hint = (outer["verificationMaterial"].get("publicKey") or {}).get("hint")
        return _statement(statement, hint)
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
        why = str(exc) if isinstance(exc, ValueError) else "not a model-signing bundle"
        raise InvalidSignature(where, why.splitlines()[0][:200]) from None


def _statement(st: dict, hint: object) -> Statement:
    if st["_type"] != STATEMENT_TYPE or st["predicateType"] != PREDICATE_TYPE:
        raise ValueError(f"not a {PREDICATE_TYPE} statement")
    predicate, (subject,) = st["predicate"], st["subject"]
    ser = predicate["serialization"]
    if ser["method"] != "files" or ser["hash_type"] != "sha256":
        raise ValueError("mint reads bundles serialized by file with sha256")
    files, root = {}, hashlib.sha256()
    for r in predicate["resources"]:
        if r["algorithm"] != "sha256" or not _HEX64.match(r["digest"]):
            raise ValueError(f"resource {r['name']!r} has no sha256 digest")
        files[str(r["name"])] = r["digest"]
        root.update(bytes.fromhex(r["digest"]))
    if root.hexdigest() != subject["digest"]["sha256"]:
        raise ValueError("its resources do not hash to its subject's digest")
    commit = (predicate.get("mint") or {}).get("commit")
    hint = hint if isinstance(hint, str) and _HEX64.match(hint) else None
    return Statement(files, [str(p) for p in ser.get("ignore_paths", [])], commit, hint)


def verify_with(bundle: bytes, public_pem: bytes, scratch: Path) -> dict[str, str]:
    """The files (path -> sha256) BUNDLE signs, if its signature verifies with the public key
    PUBLIC_PEM (model_signing's key verifier, which also checks the payload's types and that
    the resources hash to the subject); ValueError if not. SCRATCH: an empty private folder."""
    ms = model_signing()
    (scratch / "key.pub").write_bytes(public_pem)
    (scratch / SIGNATURE_FILE).write_bytes(bundle)
    signature = ms.bundle_file.Signature.read(scratch / SIGNATURE_FILE)
    try:
        manifest = ms.sign_ec_key.Verifier(scratch / "key.pub").verify(signature)
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 - cryptography's InvalidSignature is no ValueError
        raise ValueError("the signature does not verify") from exc
    return {r.identifier: r.digest.digest_hex for r in manifest.resource_descriptors()}


def folder_digests(folder: Path) -> dict[str, str]:
    """Every file of FOLDER (path -> sha256) as model_signing's verifier hashes it, only
    model.sig and git's files left out: a bundle that leaves out more (`--ignore-paths`) does
    not sign the folder for mint, whose commits sign every file. ValueError for a symbolic
    link or anything else it refuses."""
    ms = model_signing()
    config = ms.hashing.Config().set_ignored_paths(paths=IGNORED)
    manifest = config.hash(folder)
    return {r.identifier: r.digest.digest_hex for r in manifest.resource_descriptors()}
