"""The signatures a commit carries, and `verify`: which trusted key signed a commit or a folder.

A bundle is kept with a commit only if it states exactly the commit's files (paths and
sha256) and, when it names a commit, this one; its signature is checked when it is verified,
against the keys trusted then (a key can be trusted or removed later). `verify` says who
signed, or why nothing verifies, in one line.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

import sqlalchemy as sa

from mint import schema as s
from mint.commits.rows import commit_row, files_of, signatures_of
from mint.errors import InvalidObject, InvalidSignature, NotVerified
from mint.exchange.received import listing
from mint.ids import Kind
from mint.objects import Signer, Verification
from mint.refs import resolve
from mint.signing import SIGNATURE_FILE
from mint.signing.bundle import (
    Statement,
    check_private_key,
    folder_digests,
    parse,
    read,
    read_bundle,
    sign,
    verify_parsed,
)
from mint.signing.keys import fingerprint, parse_public, trusted_keys, unknown_key
from mint.signing.stored import admit, check_statement, signer_of
from mint.signing.trust import COMMITS, Keys, keys_for
from mint.store import sha256_file

UNSIGNED = "it carries no signature"  # NotVerified's why for a commit with no bundle at all


def check(bundle: bytes, files: dict[str, str], commit: str, where: str) -> Statement:
    """BUNDLE's statement, if it may be kept with COMMIT, whose files are FILES (path ->
    sha256): its strict shape, the same files, and no other commit named."""
    st = read(bundle, where)
    check_statement(st, files, commit, where)
    return st


def differences(
    signed: dict[str, str], actual: dict[str, str], absent: str = "missing"
) -> str | None:
    """The first difference between the files a bundle signs and those there, in words (a
    signed file not there is ABSENT: missing, or not pulled)."""
    for path in sorted(signed.keys() | actual.keys()):
        if path not in actual:
            return f"{path} is signed but {absent}"
        if path not in signed:
            return f"{path} is not signed"
        if signed[path] != actual[path]:
            return f"{path} differs from the signed one"
    return None


def attach(
    conn, commit: str, files: dict[str, str], bundle: bytes, where: str, *, unverified=True
) -> bool:
    """Keep BUNDLE with COMMIT if it may be kept (`mint.signing.stored.admit`: it verifies
    with the trusted key it names, or is bounded as a key's not trusted here); False when it
    adds nothing (the same bytes, or the same trusted key's signature, kept already)."""
    return admit(conn, commit, files, bundle, where, unverified=unverified)


def blob_files(conn, commit: str) -> dict[str, str]:
    return {p: f.sha256 for p, f in files_of(conn, commit).items()}


# --- verify ----------------------------------------------------------------------------


def verify(
    repo, rev: str, *, key: str | None = None, public_key: str | None = None
) -> Verification:
    """Which trusted keys (or only KEY, by name, or PUBLIC_KEY, a PEM, trusted or not) signed
    REV's files; NotVerified, with the reason of the nearest miss, if none did."""
    with repo.db.read() as conn:
        return verify_in(conn, resolve(conn, rev).id, rev, key=key, public_key=public_key)


def verify_in(
    conn, cid: str, rev: str, *, key: str | None = None, public_key: str | None = None
) -> Verification:
    """`verify` of commit CID (named REV in errors) within CONN's transaction: what a gate,
    which reads in its own transaction, checks a contract's `[signature]` with. A trusted key
    counts where it may sign (`mint.signing.trust`): an adapter commit of its line, a set."""
    trust = _trust(conn, key, public_key)
    row = commit_row(conn, cid)
    if row.kind == Kind.SET:  # its members' signatures too
        from mint.signing.sets import set_data, verify_set

        return verify_set(set_data(conn, cid), rev, trust)
    files, bundles = blob_files(conn, cid), signatures_of(conn, cid)
    if not bundles:
        raise NotVerified(rev, UNSIGNED)
    keys = trust(COMMITS, row.line)
    return _verified(rev, cid, files, [b.encode() for b in bundles], keys, cid)


def verify_folder_with(folder: str | os.PathLike, keys: dict) -> Verification:
    """Which of KEYS (fingerprint -> (name, PEM)) signed FOLDER as its model.sig says, every
    file hashed again; a set's checkout, with each member folder's model.sig verified too."""
    folder = Path(folder)
    try:
        bundle = read_bundle(folder / SIGNATURE_FILE)
    except OSError:
        raise NotVerified(str(folder), f"it has no readable {SIGNATURE_FILE}") from None
    try:
        st = read(bundle, str(folder / SIGNATURE_FILE))  # its shape first: one line if no bundle
        files = folder_digests(folder)
    except (InvalidSignature, ValueError) as exc:
        raise NotVerified(str(folder), str(exc)) from None
    found = _verified(str(folder), str(folder), files, [bundle], keys, None)
    from mint.signing.sets import is_set_statement, verify_set_folder

    if not is_set_statement(st):
        return found
    with tempfile.TemporaryDirectory(prefix="mint-verify-") as scratch:
        try:
            members = verify_set_folder(folder, st, files, keys, Path(scratch))
        except ValueError as exc:
            raise NotVerified(str(folder), str(exc)) from None
    return dataclasses.replace(found, members=members)


def _trust(conn, key: str | None, public_key):
    """(purpose, line) -> the `Keys` to check a signature of that purpose on that line with:
    the trusted keys that may sign it (only KEY, by name, if given), or PUBLIC_KEY, a PEM,
    trusted or not, for everything."""
    if public_key is not None:
        pem = parse_public(public_key)
        given = Keys({fingerprint(pem): ("", pem)})
        return lambda purpose, line: given
    if key is not None and key not in {name for name, _ in trusted_keys(conn).values()}:
        raise unknown_key(conn, key)
    found: dict[tuple[str, str], Keys] = {}

    def trust(purpose: str, line: str) -> Keys:
        if (purpose, line) not in found:
            keys = keys_for(conn, purpose, line=line)
            if key is not None:
                keys = Keys({fp: v for fp, v in keys.items() if v[0] == key}, keys.excluded)
            found[purpose, line] = keys
        return found[purpose, line]

    return trust


def _verified(rev, target, files, bundles, keys, commit) -> Verification:
    signers, misses = [], []
    with tempfile.TemporaryDirectory(prefix="mint-verify-") as scratch:
        for i, bundle in enumerate(bundles):
            try:
                signers.append(check_one(bundle, files, keys, commit, Path(scratch) / str(i)))
            except (InvalidSignature, ValueError) as exc:
                misses.append(str(exc))
    if not signers:
        raise NotVerified(rev, misses[0])
    return Verification(target, signers)


def check_one(bundle: bytes, files, keys, commit: str | None, scratch: Path) -> Signer:
    """The trusted key that signed BUNDLE over FILES (and COMMIT, if it names one), its shape
    checked as strictly as when it was stored (`mint.signing.bundle.parse`)."""
    try:
        parsed = parse(bundle)
    except InvalidSignature as exc:
        raise ValueError(exc.why) from None
    st = parsed.statement
    wrong = differences(st.files, files)
    if wrong:
        raise ValueError(f"its signature does not cover these files: {wrong}")
    if commit is not None and st.commit is not None and st.commit != commit:
        raise ValueError(f"its signature was made for commit {st.commit[:12]}, not this one")
    excluded = getattr(keys, "excluded", {})
    if st.hint in excluded and st.hint not in keys:
        raise ValueError(f"it is signed by {excluded[st.hint]}")
    candidates = [st.hint] if st.hint in keys else ([] if st.hint else list(keys))
    if not candidates:
        who = f"key {st.hint[:16]}" if st.hint else "a key"
        raise ValueError(f"it is signed by {who}, which is not trusted here")
    for fp in candidates:
        name, pem = keys[fp]
        try:
            verify_parsed(parsed, pem)
        except ValueError:
            continue
        return Signer(name, fp, st.commit is not None)
    raise ValueError("its signature does not verify with the key it names")


# --- what a commit carries ------------------------------------------------------------


class Signing:
    """What a commit of FOLDER will carry: the folder's model.sig, if it has one (checked
    against the commit's files), and a new signature with the key in file PRIVATE_KEY."""

    def __init__(self, folder, found: bytes | None, private_key, password: str | None):
        self.folder, self.found = Path(folder), found
        self.private_key, self.password = private_key, password

    @classmethod
    def of(cls, folder, private_key=None, password: str | None = None) -> Signing | None:
        """None when there is nothing to sign or keep; the key is loaded (so checked) now,
        before anything is stored."""
        path = Path(folder) / SIGNATURE_FILE
        found = read_bundle(path) if path.is_file() and not path.is_symlink() else None
        if found is None and private_key is None:
            return None
        if private_key is not None:
            check_private_key(private_key, password)
        return cls(folder, found, private_key, password)

    def bundles(self, commit: str, files: dict) -> list[bytes]:
        """The bundles COMMIT (whose FILES are path -> FileEntry) will carry, checked, or
        made: nothing is stored yet."""
        digests = {p: f.sha256 for p, f in files.items()}
        out = []
        if self.found is not None:
            check(self.found, digests, commit, str(self.folder / SIGNATURE_FILE))
            out.append(self.found)
        if self.private_key is not None:
            name = self.folder.name or self.folder.resolve().name
            out.append(sign(digests, name, commit, self.private_key, self.password))
        return out

    def checked(self, scanned, cache, head: str | None, keys=None):
        """SCANNED (a checked adapter folder) without its model.sig, which is a signature, not
        a file, and which must sign these files (hashed now, unless CACHE, the stat cache,
        knows them), name no commit but HEAD, and verify with the trusted key it names (KEYS:
        fingerprint -> (name, PEM); `mint.signing.stored`): refused before anything is
        stored."""
        kept = tuple(f for f in scanned.files if f.path != SIGNATURE_FILE)
        if self.found is not None:
            where = str(self.folder / SIGNATURE_FILE)
            parsed = parse(self.found, where)
            st = parsed.statement
            signer_of(parsed, keys or {}, st.commit, where)  # the commit it names, if any
            if st.commit is not None and st.commit != head:
                raise InvalidSignature(where, f"it was made for commit {st.commit[:12]}")
            paths = {f.path: st.files.get(f.path) for f in kept}
            wrong = differences(st.files, paths) or differences(
                st.files, {f.path: _sha256(f, cache) for f in kept}
            )
            if wrong:
                raise InvalidSignature(where, f"it does not sign these files ({wrong})")
        return dataclasses.replace(scanned, files=kept)


# --- on the wire (push, fetch, clone: mint.exchange) -------------------------------------


def signatures_wire(conn, ids: list[str]) -> dict:
    """The bundles commits IDS carry, as a push or fetch sends them beside the commits, and
    those of the members of sets among them (a set's signature names its members', which may
    have been signed after they were sent): {"signatures": [{commit, bundle}, ...]}, or
    nothing when there are none."""
    if not ids:
        return {}
    m = s.set_members.c
    members = sa.select(m.member_id).where(m.commit_id.in_(ids))
    c = s.commit_signatures.c
    q = (
        sa.select(c.commit_id, c.bundle)
        .where(c.commit_id.in_(ids) | c.commit_id.in_(members))
        .order_by(c.added_at, c.sha256)
    )
    found = [{"commit": r.commit_id, "bundle": r.bundle} for r in conn.execute(q)]
    return {"signatures": found} if found else {}


def receive_signatures(conn, payload: dict, sender, recorded: list[str]) -> int:
    """Keep each bundle of PAYLOAD's signatures with its commit, which must be here and on a
    line the SENDER reaches (a `mint.exchange.receiving.Admission`: its `check_line` raises
    otherwise), checked as a local commit checks a folder's model.sig (`attach`; a set's as
    `mint.signing.sets.attach_set` does), a set's after its members' (it names theirs). A
    bundle by a key not trusted here is kept, from a pusher (`sender.by`), only with a commit
    among RECORDED, the commits its import records (no pusher grows another person's commit);
    from a fetch into this repository, with any. Returns how many were kept."""
    new = set(recorded) if sender.by is not None else None
    arrived = [
        _arrived(conn, wire, sender.check_line)
        for wire in listing(payload.get("signatures", []), "signatures")
    ]
    kept = 0
    for commit, bundle, _ in sorted(arrived, key=lambda a: a[2] == Kind.SET):
        where = f"for {commit[:12]}"  # "signature for 3f2a9c1e0b7d: it was made for ..."
        try:
            unverified = new is None or commit in new
            kept += attach_any(conn, commit, bundle, where, unverified=unverified)
        except InvalidSignature as exc:
            raise InvalidObject(str(exc)) from None
    return kept


def _arrived(conn, wire: object, check_line) -> tuple[str, bytes, str]:
    """(commit, bundle, the commit's kind) of a bundle that arrived as WIRE ({commit,
    bundle}), its commit here and on a line the sender reaches."""
    if not (isinstance(wire, dict) and set(wire) == {"commit", "bundle"}):
        raise InvalidObject("a signature is {commit, bundle}")
    commit, bundle = wire["commit"], wire["bundle"]
    if not (isinstance(commit, str) and isinstance(bundle, str)):
        raise InvalidObject("a signature's commit and bundle are strings")
    c = s.commits.c
    row = conn.execute(sa.select(c.line, c.kind).where(c.id == commit)).first()
    if row is None:
        raise InvalidObject(f"a signature names commit {commit[:12]!r}, which is not here")
    check_line(row.line)
    return commit, bundle.encode("utf-8", "surrogatepass"), row.kind


def attach_any(conn, commit: str, bundle: bytes, where: str, *, unverified=True) -> bool:
    """`attach` BUNDLE to COMMIT, an adapter's or a set's (`mint.signing.sets.attach_set`)."""
    if commit_row(conn, commit).kind == Kind.SET:
        from mint.signing.sets import attach_set

        return attach_set(conn, commit, bundle, where, unverified=unverified)
    return attach(conn, commit, blob_files(conn, commit), bundle, where, unverified=unverified)


def attach_signatures(repo, commit: str, bundles: list[str]) -> int:
    """Keep BUNDLES (made on the signer's machine) with COMMIT, an adapter's or a set's, each
    checked as one that arrives with a push (a registry receives them so: POST /objects).
    Returns how many were kept (none: each was kept already)."""
    with repo.db.write() as conn:
        return sum(attach_any(conn, commit, b.encode(), SIGNATURE_FILE) for b in bundles)


def _sha256(f, cache) -> str:
    """The sha256 of scanned file F: from the stat cache if it knows F unchanged, else read."""
    known = cache.get(f.abspath, f.stat)
    return known.blob if known is not None else sha256_file(f.abspath)
