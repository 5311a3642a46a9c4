"""Key pairs and the public keys a repository trusts.

A private key is written once, created 0600 with O_EXCL (never readable by others, not even
for a moment, and never over an existing file), and is only ever read by the signer. A
public key's fingerprint is the sha256 of its PEM (SubjectPublicKeyInfo): the `hint` that
model_signing's key signer writes into a bundle, so a bundle names the key that made it.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import os
from pathlib import Path

import sqlalchemy as sa

from mint import schema as s
from mint.errors import (
    InvalidAdapter,
    InvalidKey,
    KeyExists,
    RevisionNotFound,
    SigningUnavailable,
)
from mint.ids import iso, utcnow
from mint.objects import GeneratedKey, SigningKey
from mint.refs.revisions import check_name

PRIVATE_NAME, PUBLIC_NAME = "signing.key", "signing.pub"
# The curves model_signing's key signer and verifier accept (P-256 is what `generate` makes).
CURVES = ("secp256r1", "secp384r1", "secp521r1")
MAX_PEM = 16 * 1024


def crypto():
    """cryptography's serialization and ec modules (installed with model-signing)."""
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec
    except ImportError:
        raise SigningUnavailable("signing needs the model-signing package") from None
    return serialization, ec


def key_generate(out: str | os.PathLike, *, password: str | None = None) -> GeneratedKey:
    """Write a new P-256 key pair into OUT (made 0700 if new): `signing.key`, the private key
    as PKCS#8 PEM (encrypted with PASSWORD if given), 0600, and `signing.pub`. Refuses to
    write over either."""
    serialization, ec = crypto()
    out = Path(out)
    private, public = out / PRIVATE_NAME, out / PUBLIC_NAME
    for path in (private, public):
        if path.exists():
            raise InvalidKey(str(path), "a file is there already; choose another folder")
    key = ec.generate_private_key(ec.SECP256R1())
    crypt = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, crypt)
    public_pem = public_pem_of(key.public_key())
    try:
        out.mkdir(mode=0o700, parents=True, exist_ok=True)
        _write_new(private, pem, 0o600)
        _write_new(public, public_pem, 0o644)
    except OSError as exc:
        raise InvalidKey(str(out), exc.strerror or "cannot be written") from None
    return GeneratedKey(str(private), str(public), fingerprint(public_pem), bool(password))


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """DATA into a new file PATH, created with MODE (so never wider, even briefly), durable."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def public_pem_of(public_key) -> bytes:
    serialization, _ = crypto()
    return public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def fingerprint(public_pem: bytes) -> str:
    """The key's id, as model_signing's bundles name it: sha256 of its canonical PEM."""
    return hashlib.sha256(public_pem).hexdigest()


def parse_public(raw: str | bytes, where: str = "given") -> bytes:
    """The canonical PEM of the elliptic-curve public key RAW; a private key, another kind of
    key or anything else is refused (without quoting it)."""
    serialization, ec = crypto()
    raw = raw.encode("utf-8", "replace") if isinstance(raw, str) else raw
    if b"PRIVATE KEY" in raw:
        raise InvalidKey(where, "this is a private key; give the public one (.pub)")
    try:
        key = serialization.load_pem_public_key(raw[:MAX_PEM])
    except (ValueError, TypeError):
        raise InvalidKey(where, "not a PEM public key") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name not in CURVES:
        raise InvalidKey(where, f"not an elliptic-curve key on {', '.join(CURVES)}")
    return public_pem_of(key)


# --- the keys a repository trusts ------------------------------------------------------


def key_add(
    repo,
    name: str,
    public_key: str,
    *,
    by: str,
    purposes=None,
    lines: list[str] | None = None,
    channels: list[str] | None = None,
) -> SigningKey:
    """Trust PUBLIC_KEY (an elliptic-curve public key, PEM) under NAME, to sign PURPOSES
    (among commits, sets and moves), on LINES (globs), of CHANNELS (each None: no limit;
    `mint.signing.trust`)."""
    from mint.signing.trust import check_limits

    check_name("key", name)
    limits = check_limits(purposes, lines, channels)
    pem = parse_public(public_key)
    fp, k = fingerprint(pem), s.signing_keys.c
    with repo.db.write() as conn:
        for row in conn.execute(
            sa.select(k.name, k.fingerprint).where((k.name == name) | (k.fingerprint == fp))
        ):
            why = "the name is taken" if row.name == name else f"the key is trusted as {row.name}"
            raise KeyExists(f"trusted key {name!r}: {why}")
        values = dict(name=name, fingerprint=fp, public_pem=pem.decode(), added_by=by)
        conn.execute(s.signing_keys.insert().values(**values, **limits, added_at=utcnow()))
        return as_key(conn.execute(sa.select(s.signing_keys).where(k.name == name)).one())


def key_ls(repo) -> list[SigningKey]:
    """The trusted keys, by name."""
    k = s.signing_keys.c
    with repo.db.read() as conn:
        rows = conn.execute(sa.select(s.signing_keys).order_by(k.name)).all()
    return [as_key(r) for r in rows]


def as_key(r) -> SigningKey:
    """The `SigningKey` of a signing_keys row."""
    return SigningKey(
        r.name,
        r.fingerprint,
        iso(r.added_at),
        r.added_by,
        r.public_pem,
        r.purposes,
        r.lines,
        r.channels,
    )


def key_rm(repo, name: str) -> SigningKey:
    """Stop trusting the key NAME (signatures it made stay, and no longer verify)."""
    k = s.signing_keys.c
    with repo.db.write() as conn:
        row = conn.execute(sa.select(s.signing_keys).where(k.name == name)).first()
        if row is None:
            raise unknown_key(conn, name)
        conn.execute(s.signing_keys.delete().where(k.name == name))
    return as_key(row)


def unknown_key(conn, name: str) -> RevisionNotFound:
    """The error for a key NAME that is not trusted here, with the nearest names trusted."""
    names = [r.name for r in conn.execute(sa.select(s.signing_keys.c.name))]
    near = difflib.get_close_matches(name, names, n=3)
    return RevisionNotFound(name, "no trusted key named", near)


def trusted_keys(conn) -> dict[str, tuple[str, bytes]]:
    """fingerprint -> (name, public PEM) of every trusted key."""
    rows = conn.execute(_all_keys()).all()
    return {r.fingerprint: (r.name, r.public_pem.encode()) for r in rows}


@functools.cache
def _all_keys():
    k = s.signing_keys.c
    return sa.select(k.name, k.fingerprint, k.public_pem)  # built once (issue 24)


# Where a private key is looked for in a folder about to be committed: names only, so that a
# commit reads no other file (the stat cache's promise); a key file by another name is the
# user's to keep out.
KEY_SUFFIXES = (".key", ".pem", ".p8")


def refuse_private_keys(folder: str | os.PathLike) -> None:
    """Refuse a folder that holds a private key (a PEM file named *.key, *.pem or *.p8 whose
    text says so): a private key never enters a repository."""
    root = Path(folder)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            path = Path(dirpath) / name
            if name.lower().endswith(KEY_SUFFIXES) and _holds_private_key(path):
                rel = path.relative_to(root).as_posix()
                why = f"{rel} is a private key; mint never stores one: keep it outside"
                raise InvalidAdapter(root, why)


def _holds_private_key(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return b"PRIVATE KEY-----" in f.read(MAX_PEM)
    except OSError:
        return False
