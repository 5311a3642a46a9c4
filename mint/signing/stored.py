"""What a commit may carry as a signature, checked where a bundle is stored (issue 35).

Every door that keeps a bundle with a commit (`mint commit` and a folder's model.sig, `--sign`,
`set commit`, a pull, a push's `POST /objects`, a fetch) ends in `admit`, in the transaction
that stores it. A bundle is kept only when it proves something, or is bounded and says it
proves nothing here:

- its shape is the strict one verification reads (`mint.signing.bundle.parse`), at most
  MAX_BUNDLE bytes, and it states exactly the commit's files and names no other commit;
- a bundle that names a trusted key (its hint) must verify with that key, and one that names
  none must verify with some trusted key: otherwise it is refused, with nothing stored, so a
  forged bundle can never be kept in a trusted key's name (nor take the place of its real
  signature);
- a bundle by a key not trusted here (a vendor's, a key trusted elsewhere) is kept as
  unverified: at most MAX_UNVERIFIED of them a commit, and, where the sender is not this
  repository's owner (a push to a registry), only with a commit the same import records, so
  no writer grows another person's commit;
- a bundle adds nothing when its bytes are kept already, or when a signature by the same
  trusted key (of the commit, or of its files) that verifies is kept already;
- a commit carries at most MAX_SIGNATURES bundles, counted under a lock of its row.

`bad_signatures` finds what an older mint kept against these rules (`mint fsck` reports them),
and `prune_signatures` removes them (`mint signature prune`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib

import sqlalchemy as sa

from mint import schema as s
from mint.errors import InvalidSignature
from mint.ids import Kind, utcnow
from mint.objects import SignaturePrune, StoredSignature
from mint.signing.bundle import Parsed, Statement, parse, verify_parsed
from mint.signing.keys import trusted_keys

MAX_SIGNATURES = 16  # bundles one commit carries, at most
MAX_UNVERIFIED = 4  # of them, bundles by keys not trusted here


def check_statement(st: Statement, files: dict[str, str], commit: str, where: str) -> None:
    """ST states exactly FILES (path -> sha256) and names no commit but COMMIT."""
    from mint.signing.commits import differences

    wrong = differences(st.files, files)
    if wrong:
        raise InvalidSignature(where, f"it does not sign these files ({wrong})")
    if st.commit is not None and st.commit != commit:
        raise InvalidSignature(where, f"it was made for commit {st.commit[:12]}, not this one")


def signer_of(parsed: Parsed, keys: dict, commit: str | None, where: str) -> str | None:
    """The fingerprint of the trusted key (KEYS: fingerprint -> (name, PEM)) whose signature
    PARSED is, or None for a key not trusted here. InvalidSignature when it names a trusted
    key and does not verify with it, or names none and no trusted key verifies it (COMMIT,
    the one it was to be kept with, named; None: a commit not made yet)."""
    hint = parsed.statement.hint
    refused = f": refused for commit {commit[:12]}" if commit else ""
    if hint in keys:
        name, pem = keys[hint]
        try:
            verify_parsed(parsed, pem)
        except ValueError:
            why = f"it names trusted key {name} ({hint[:16]}) and does not verify with it"
            raise InvalidSignature(where, why + refused) from None
        return hint
    if hint is not None:
        return None
    for fp, (_, pem) in keys.items():
        try:
            verify_parsed(parsed, pem)
        except ValueError:
            continue
        return fp
    why = "it names no key, and no key trusted here verifies it"
    raise InvalidSignature(where, why + refused)


def admit(
    conn, commit: str, files: dict[str, str], bundle: bytes, where: str, *, unverified=True
) -> bool:
    """Keep BUNDLE with COMMIT (whose signed files are FILES: path -> sha256) if the rules
    above let it in; False when it adds nothing. UNVERIFIED: whether a bundle by a key not
    trusted here may be kept (a registry's push: only with a commit it records)."""
    parsed = parse(bundle, where)
    st = parsed.statement
    check_statement(st, files, commit, where)
    keys = trusted_keys(conn)
    signer = signer_of(parsed, keys, commit, where)
    conn.execute(_locked(), {"cid": commit})  # PostgreSQL: one import at a time counts them
    kept = conn.execute(_kept(), {"cid": commit}).all()
    digest = hashlib.sha256(bundle).hexdigest()
    if any(r.sha256 == digest for r in kept):
        return False
    if signer is not None and any(_same(r, signer, st, keys) for r in kept):
        return False
    if signer is None:
        _room_unverified(kept, keys, st.hint, commit, where, unverified)
    if len(kept) >= MAX_SIGNATURES:
        why = f"commit {commit[:12]} carries {MAX_SIGNATURES} signatures, as many as one may"
        raise InvalidSignature(where, why)
    row = dict(commit_id=commit, sha256=digest, bundle=bundle.decode(), added_at=utcnow())
    conn.execute(_insert(), {**row, "key_hint": signer or st.hint})
    return True


# Built once, their values bound: building a statement costs more than running it (issue 24).
@functools.cache
def _locked():
    return sa.select(s.commits.c.id).where(s.commits.c.id == sa.bindparam("cid")).with_for_update()


@functools.cache
def _kept():
    c = s.commit_signatures.c
    return sa.select(c.sha256, c.bundle, c.key_hint).where(c.commit_id == sa.bindparam("cid"))


@functools.cache
def _insert():
    return s.commit_signatures.insert()


def _same(row, signer: str, st: Statement, keys: dict) -> bool:
    """Whether the kept ROW is a signature by SIGNER, of the commit as ST is (naming it, or
    only its files), that verifies: then ST's adds nothing."""
    if row.key_hint not in (signer, None):
        return False
    try:
        kept = parse(row.bundle.encode())
        verify_parsed(kept, keys[signer][1])
    except (InvalidSignature, ValueError):
        return False  # an older mint kept it unchecked: it stands in for nothing
    return (kept.statement.commit is None) == (st.commit is None)


def _room_unverified(kept, keys, hint, commit: str, where: str, allowed: bool) -> None:
    who = f"key {hint[:16]}"
    if not allowed:
        why = (
            f"it is signed by {who}, which is not trusted here; commit {commit[:12]} is here "
            "already, and takes only signatures that verify with a trusted key"
        )
        raise InvalidSignature(where, why)
    if sum(1 for r in kept if r.key_hint not in keys) >= MAX_UNVERIFIED:
        why = (
            f"it is signed by {who}, which is not trusted here, and commit {commit[:12]} "
            f"carries {MAX_UNVERIFIED} such signatures already"
        )
        raise InvalidSignature(where, why)


# --- what an older mint kept ------------------------------------------------------------


def bad_signatures(conn) -> list[StoredSignature]:
    """Every kept bundle that breaks the rules (against the keys trusted now), members'
    before sets' (a set's bundle names its members'); then bundles beyond a commit's
    limits, newest first."""
    keys = trusted_keys(conn)
    c, k = s.commit_signatures.c, s.commits.c
    q = (
        sa.select(c.commit_id, c.sha256, c.bundle, c.key_hint, k.kind)
        .join(s.commits, k.id == c.commit_id)
        .order_by(k.kind, c.commit_id, c.added_at, c.sha256)
    )
    rows = conn.execute(q).all()
    bad: dict[str, StoredSignature] = {}
    for kind in (Kind.ADAPTER, Kind.SET):  # a set's check reads its members' kept bundles
        for r in (r for r in rows if r.kind == kind):
            why = _why_bad(conn, r, keys, set(bad))
            if why is not None:
                bad[r.sha256 + r.commit_id] = StoredSignature(r.commit_id, r.sha256, why)
    good = [r for r in rows if r.sha256 + r.commit_id not in bad]
    return list(bad.values()) + _beyond_limits(good, keys)


def _why_bad(conn, r, keys: dict, gone: set[str]) -> str | None:
    where = f"for {r.commit_id[:12]}"
    try:
        parsed = parse(r.bundle.encode(), where)
        files = expected_files(conn, r.commit_id, r.kind, parsed.statement, gone)
        check_statement(parsed.statement, files, r.commit_id, where)
        signer_of(parsed, keys, r.commit_id, where)
    except InvalidSignature as exc:
        return exc.why
    return None


def expected_files(conn, commit: str, kind: str, st: Statement, gone=frozenset()) -> dict:
    """The files (path -> sha256) a bundle stating ST must sign for COMMIT: an adapter's
    files; a set's layout with the members' bundles ST names (not among GONE: sha256 +
    member's commit id, bundles about to be removed)."""
    from mint.signing.commits import blob_files

    if kind != Kind.SET:
        return blob_files(conn, commit)
    from mint.signing.sets import expected_files as set_expected
    from mint.signing.sets import set_data, sha256

    data = set_data(conn, commit)
    if gone:
        bundles = data.member_bundles.items()
        left = {m: [b for b in bs if sha256(b) + m not in gone] for m, bs in bundles}
        data = dataclasses.replace(data, member_bundles=left)
    try:
        return set_expected(data, st)[0]
    except ValueError as exc:
        raise InvalidSignature(f"for {commit[:12]}", str(exc)) from None


def _beyond_limits(rows, keys: dict) -> list[StoredSignature]:
    by_commit: dict[str, list] = {}
    for r in rows:
        by_commit.setdefault(r.commit_id, []).append(r)
    out = []
    for cid, kept in by_commit.items():
        unknown = [r for r in kept if r.key_hint not in keys]
        extra = unknown[MAX_UNVERIFIED:]
        rest = [r for r in kept if r not in extra]
        extra += rest[MAX_SIGNATURES:]
        for r in reversed(extra):
            out.append(StoredSignature(cid, r.sha256, "beyond what one commit may carry"))
    return out


def signature_prune(repo, *, dry_run: bool = False) -> SignaturePrune:
    """Remove every kept bundle that `bad_signatures` finds (planned and removed in one
    transaction: what is removed is what was found); DRY_RUN: only say which."""
    with repo.db.write() as conn:
        found = bad_signatures(conn)
        if not dry_run:
            c = s.commit_signatures.c
            for bad in found:
                conn.execute(
                    s.commit_signatures.delete().where(
                        c.commit_id == bad.commit, c.sha256 == bad.sha256
                    )
                )
    return SignaturePrune(found, removed=not dry_run and bool(found))
