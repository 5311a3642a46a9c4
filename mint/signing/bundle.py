"""The OpenSSF model-signing format, as model_signing 1.1 writes and reads it.

A bundle is a Sigstore bundle (JSON) holding a DSSE envelope holding an in-toto statement:
its predicate lists every file with its sha256 (`resources`) and how the folder was
serialized (`serialization`: by file, sha256, no symlinks, `model.sig` and git's files
ignored: `model_signing sign`'s defaults). mint builds that manifest from a commit's blob ids,
which are the files' sha256, so signing reads no file again. The bundle is made and checked
with cryptography alone, field for field as model_signing's key signer writes it and as its
key verifier checks it, and a folder is hashed as its `hashing` module hashes one (importing
model_signing loads sigstore: about a second of CPU a process); the tests hold the format to
model_signing both ways (tests/test_signing_format.py, tests/test_signing.py). A bundle mint
makes also names the commit in its predicate (`mint.commit`), which v1.0 verifiers ignore and
`mint verify` checks, so it cannot be replayed onto another commit with the same files.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from mint.errors import InvalidKey, InvalidSignature
from mint.signing import SIGNATURE_FILE

MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"
# What `model_signing sign DIR --signature DIR/model.sig` ignores (it lists them in set order;
# a verifier reads them as a set), sorted so that a bundle's bytes do not depend on a hash seed.
IGNORED = sorted([SIGNATURE_FILE, ".git", ".gitattributes", ".github", ".gitignore"])
# A bundle's size, at most: a key's bundle of a commit of about a thousand files. Its fields are
# checked exactly (`parse`), so what makes one large is the files it lists.
MAX_BUNDLE = 256 * 1024
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Statement:
    """What a bundle says, read without checking its signature."""

    files: dict[str, str]  # path -> sha256
    ignored: list[str]
    commit: str | None  # the commit a mint-made bundle names
    hint: str | None  # the fingerprint of the key that claims to have signed it


def statement(files: dict[str, str], name: str, commit: str | None = None) -> bytes:
    """The in-toto statement of FILES (path -> sha256) in a folder NAME, as model_signing's
    key signer serializes it (`json_format.MessageToJson`: two-space indent, ASCII only): the
    resources in its order (by path, component by component), the subject's digest the sha256
    of their digests in that order. model_signing keeps the predicate in a protobuf Struct,
    whose keys come out in an order that changes from one process to the next; mint writes
    them in the order model_signing builds them."""
    root, resources = hashlib.sha256(), []
    for path in sorted(files, key=PurePosixPath):
        digest = files[path]
        root.update(bytes.fromhex(digest))
        resources.append({"name": path, "algorithm": "sha256", "digest": digest})
    ser = {"method": "files", "hash_type": "sha256", "allow_symlinks": False}
    predicate = {"serialization": {**ser, "ignore_paths": IGNORED}, "resources": resources}
    if commit is not None:
        predicate["mint"] = {"commit": commit}
    st = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": root.hexdigest()}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }
    return json.dumps(st, indent=2, ensure_ascii=True).encode("utf-8")


def pae(payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding of an in-toto PAYLOAD: what is signed."""
    return b"DSSEv1 %d %s %d " % (len(PAYLOAD_TYPE), PAYLOAD_TYPE.encode(), len(payload)) + payload


def _pae_compat(payload: bytes) -> bytes:
    """The encoding model_signing 0.2 signed by mistake (bytes formatted into a str), which
    model_signing's verifier still accepts: so does mint's."""
    return f"DSSEV1 {len(PAYLOAD_TYPE)} {PAYLOAD_TYPE} {len(payload)} {payload}".encode()


def hash_for(key):
    """The hash model_signing pairs with the key's curve (P-256: SHA-256, P-384: SHA-384,
    P-521: SHA-512)."""
    from cryptography.hazmat.primitives import hashes

    size = key.curve.key_size
    return {256: hashes.SHA256, 384: hashes.SHA384, 521: hashes.SHA512}[size]()


def sign(
    files: dict[str, str],
    name: str,
    commit: str | None,
    private_key: str | os.PathLike,
    password: str | None = None,
) -> bytes:
    """The bundle of FILES (path -> sha256) signed with the key in file PRIVATE_KEY, as
    `model_signing sign key` makes it for a folder NAME holding them (the same JSON, field by
    field: a Sigstore bundle whose verificationMaterial names the key by `publicKey.hint`,
    holding a DSSE envelope of the statement with one ECDSA signature over its PAE); COMMIT,
    if given, named in the predicate. cryptography alone: model_signing is not imported."""
    key = load_private_key(private_key, password)
    return seal(statement(files, name, commit), key)


def seal(payload: bytes, key) -> bytes:
    """A Sigstore bundle whose verificationMaterial names KEY (an elliptic-curve private key)
    by `publicKey.hint`, holding a DSSE envelope of the in-toto PAYLOAD with one ECDSA
    signature over its PAE: a commit's signature, or a move's (`mint.signing.moves`)."""
    from cryptography.hazmat.primitives.asymmetric import ec

    from mint.signing.keys import fingerprint, public_pem_of

    signature = key.sign(pae(payload), ec.ECDSA(hash_for(key)))
    bundle = {
        "mediaType": MEDIA_TYPE,
        "verificationMaterial": {
            "publicKey": {"hint": fingerprint(public_pem_of(key.public_key()))},
            "tlogEntries": [],
        },
        "dsseEnvelope": {
            "payload": base64.b64encode(payload).decode(),
            "payloadType": PAYLOAD_TYPE,
            "signatures": [{"sig": base64.b64encode(signature).decode(), "keyid": ""}],
        },
    }
    return json.dumps(bundle, separators=(",", ":")).encode("utf-8")


def load_private_key(private_key: str | os.PathLike, password: str | None = None):
    """The elliptic-curve private key in file PRIVATE_KEY (on a curve model_signing takes);
    a key that cannot be loaded fails in one line that never quotes it."""
    from mint.signing.keys import CURVES, crypto

    serialization, ec = crypto()
    path = Path(private_key)
    with _key_errors(path, password):
        key = serialization.load_pem_private_key(
            path.read_bytes(), password.encode() if password else None
        )
        if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name not in CURVES:
            raise ValueError("not an elliptic-curve key")
    return key


def check_private_key(private_key: str | os.PathLike, password: str | None = None) -> None:
    """Load the key as the signer will, so that a wrong key or password fails before
    anything is stored."""
    load_private_key(private_key, password)


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


@dataclass(frozen=True)
class Parsed:
    """A bundle whose shape was checked (`parse`): what its statement says, and what its
    one signature signs."""

    statement: Statement
    payload: bytes
    signature: bytes


def read(bundle: bytes, where: str = SIGNATURE_FILE) -> Statement:
    """What BUNDLE states, its shape checked strictly (`parse`; its signature is not checked
    here: `verify_with` does that)."""
    return parse(bundle, where).statement


def parse(bundle: bytes, where: str = SIGNATURE_FILE) -> Parsed:
    """BUNDLE read with the one strict check of its shape that storing a bundle and verifying
    one both use: at most MAX_BUNDLE bytes; exactly the fields model_signing's key signer
    writes (no other field at any level, so that nothing rides along unsigned); one DSSE
    signature; one subject; resources by file with sha256, each path once; a key hint, when
    present, a sha256. InvalidSignature, in one line, for anything else."""
    if len(bundle) > MAX_BUNDLE:
        raise InvalidSignature(where, f"larger than {MAX_BUNDLE} bytes")
    try:
        outer = json.loads(bundle.decode("utf-8"))  # UTF-8 only: it is kept as text
        (payload, signature), hint = _envelope(outer)
        st = json.loads(payload.decode("utf-8"))
        return Parsed(_statement(st, hint), payload, signature)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, binascii.Error) as exc:
        why = str(exc) if type(exc) is ValueError else "not a model-signing bundle"
        raise InvalidSignature(where, why.splitlines()[0][:200]) from None


def _fields(value: object, required: set[str], optional: frozenset = frozenset()) -> dict:
    """VALUE, an object with every field of REQUIRED and none but those and OPTIONAL."""
    if not isinstance(value, dict):
        raise TypeError("not an object")
    keys = set(value)
    if not required <= keys or not keys <= required | optional:
        extra = sorted(keys - required - optional)
        raise ValueError(f"a field a model-signing bundle does not have: {extra[:3] or 'none'}")
    return value


def _envelope(outer: object) -> tuple[tuple[bytes, bytes], str | None]:
    _fields(outer, {"mediaType", "verificationMaterial", "dsseEnvelope"})
    if outer["mediaType"] != MEDIA_TYPE:
        raise ValueError(f"not a {MEDIA_TYPE}")
    material = _fields(outer["verificationMaterial"], set(), _MATERIAL)
    if material.get("tlogEntries", []) != []:
        raise ValueError("it carries transparency log entries, which a key's bundle has none of")
    hint = _fields(material.get("publicKey", {}), set(), _PUBLIC_KEY).get("hint")
    if hint is not None and not (isinstance(hint, str) and _HEX64.match(hint)):
        raise ValueError("its key hint is not a sha256")
    env = _fields(outer["dsseEnvelope"], {"payload", "payloadType", "signatures"})
    if env["payloadType"] != PAYLOAD_TYPE:
        raise ValueError(f"its payload is not {PAYLOAD_TYPE}")
    if not isinstance(env["signatures"], list) or len(env["signatures"]) != 1:
        raise ValueError("it does not carry exactly one signature")
    one = _fields(env["signatures"][0], {"sig"}, _SIGNATURE)
    if not isinstance(one.get("keyid", ""), str) or len(one.get("keyid", "")) > 256:
        raise ValueError("its signature's keyid is not a short string")
    signature = base64.b64decode(one["sig"], validate=True)
    if not 0 < len(signature) <= MAX_SIGNATURE:
        raise ValueError("its signature is not an ECDSA signature")
    return (base64.b64decode(env["payload"], validate=True), signature), hint or None


_MATERIAL = frozenset({"publicKey", "tlogEntries"})
_PUBLIC_KEY = frozenset({"hint"})
_SIGNATURE = frozenset({"keyid"})
MAX_SIGNATURE = 160  # bytes: a DER ECDSA signature on P-521, the largest curve, is at most 139
MAX_NAME = 1000  # characters of a subject's name or a path model_signing ignores
MAX_IGNORED = 64  # paths a statement may say it ignored


def _statement(st: object, hint: str | None) -> Statement:
    _fields(st, {"_type", "subject", "predicateType", "predicate"})
    if st["_type"] != STATEMENT_TYPE or st["predicateType"] != PREDICATE_TYPE:
        raise ValueError(f"not a {PREDICATE_TYPE} statement")
    if not isinstance(st["subject"], list) or len(st["subject"]) != 1:
        raise ValueError("it does not have exactly one subject")
    subject = st["subject"][0]
    _fields(subject, {"name", "digest"})
    digest = _fields(subject["digest"], {"sha256"})["sha256"]
    if not isinstance(subject["name"], str) or len(subject["name"]) > MAX_NAME:
        raise ValueError("its subject's name is not a short string")
    predicate = _fields(st["predicate"], {"serialization", "resources"}, frozenset({"mint"}))
    ser = _fields(predicate["serialization"], _SERIALIZATION, frozenset({"ignore_paths"}))
    if ser["method"] != "files" or ser["hash_type"] != "sha256":
        raise ValueError("mint reads bundles serialized by file with sha256")
    if not isinstance(ser["allow_symlinks"], bool):
        raise ValueError("its serialization is not model_signing's")
    ignored = ser.get("ignore_paths", [])
    if not isinstance(ignored, list) or len(ignored) > MAX_IGNORED:
        raise ValueError("its ignored paths are not a short list")
    if not all(isinstance(p, str) and len(p) <= MAX_NAME for p in ignored):
        raise ValueError("its ignored paths are not short strings")
    files, root = {}, hashlib.sha256()
    for r in predicate["resources"]:
        _fields(r, {"name", "algorithm", "digest"})
        if not isinstance(r["name"], str) or not r["name"] or r["name"] in files:
            raise ValueError(f"resource {str(r['name'])[:100]!r} is named twice, or not at all")
        if r["algorithm"] != "sha256" or not isinstance(r["digest"], str):
            raise ValueError(f"resource {r['name'][:100]!r} has no sha256 digest")
        if not _HEX64.match(r["digest"]):
            raise ValueError(f"resource {r['name'][:100]!r} has no sha256 digest")
        files[r["name"]] = r["digest"]
        root.update(bytes.fromhex(r["digest"]))
    if root.hexdigest() != digest:
        raise ValueError("its resources do not hash to its subject's digest")
    commit = None
    if "mint" in predicate:
        commit = _fields(predicate["mint"], {"commit"})["commit"]
        if not (isinstance(commit, str) and _HEX64.match(commit)):
            raise ValueError("the commit it names is not a commit id")
    return Statement(files, list(ignored), commit, hint)


_SERIALIZATION = {"method", "hash_type", "allow_symlinks"}


def verify_with(bundle: bytes, public_pem: bytes, scratch: Path | None = None) -> dict[str, str]:
    """The files (path -> sha256) BUNDLE signs, if its signature verifies with the public key
    PUBLIC_PEM; ValueError if not. What model_signing's key verifier checks, with cryptography
    alone: the bundle's shape (`parse`, the same strict check as when it is stored), that the
    key it names (`publicKey.hint`, if any) is this one, the envelope's signature over the PAE
    of its payload (or the encoding model_signing 0.2 signed), and that the resources hash to
    the subject's digest. SCRATCH is not used (model_signing's verifier read files; this reads
    none)."""
    try:
        parsed = parse(bundle)
    except InvalidSignature as exc:
        raise ValueError(exc.why) from None
    return verify_parsed(parsed, public_pem)


def verify_parsed(parsed: Parsed, public_pem: bytes) -> dict[str, str]:
    """`verify_with` of a bundle parsed already."""
    from cryptography.exceptions import InvalidSignature as BadSignature
    from cryptography.hazmat.primitives.asymmetric import ec

    from mint.signing.keys import CURVES, crypto, fingerprint

    serialization, _ = crypto()
    hint = parsed.statement.hint
    if hint is not None and hint != fingerprint(public_pem):
        raise ValueError("the key the signature names is not this key")
    key = serialization.load_pem_public_key(public_pem)
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name not in CURVES:
        raise ValueError("not an elliptic-curve public key model_signing takes")
    algorithm = ec.ECDSA(hash_for(key))
    try:
        key.verify(parsed.signature, pae(parsed.payload), algorithm)
    except BadSignature:
        try:
            key.verify(parsed.signature, _pae_compat(parsed.payload), algorithm)
        except BadSignature:
            raise ValueError("the signature does not verify") from None
    return parsed.statement.files


def envelope(bundle: bytes) -> tuple[tuple[bytes, bytes], str | None]:
    """((payload, its one signature), key hint) of BUNDLE, its outer shape checked as `parse`
    checks it (a signed move's bundle: `mint.signing.moves`)."""
    try:
        return _envelope(json.loads(bundle.decode("utf-8")))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, binascii.Error) as exc:
        raise ValueError("not a model-signing bundle") from exc


def folder_digests(folder: Path) -> dict[str, str]:
    """Every file of FOLDER (path -> sha256) as model_signing's verifier hashes a folder (its
    `hashing.Config().hash`, by file, sha256, no symbolic links), only model.sig and git's
    files at the top left out: a bundle that leaves out more (`--ignore-paths`) does not sign
    the folder for mint, whose commits sign every file. Every entry is checked, those left out
    too, as model_signing checks them: ValueError for a symbolic link, or anything that is
    neither a file nor a folder."""
    from mint.store import sha256_file

    root = Path(folder)
    _plain(root, root)
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        for name in (*dirnames, *filenames):
            _plain(here / name, root)
        for name in filenames:
            rel = (here / name).relative_to(root).as_posix()
            if rel.split("/", 1)[0] not in IGNORED:
                out[rel] = sha256_file(here / name)
    return out


def _plain(path: Path, root: Path) -> None:
    """PATH is a file or a folder, and no symbolic link (model_signing's check)."""
    shown = path.relative_to(root).as_posix() if path != root else str(root)
    if path.is_symlink():
        raise ValueError(f"{shown} is a symbolic link: a signed folder holds none")
    if not (path.is_file() or path.is_dir()):
        raise ValueError(f"{shown} is neither a file nor a folder")
