"""Signed sets (issue 23): a set's signature covers its mol.toml, its prompts, every member's
files and each member's own signature.

A set's bundle is the model-signing statement of the set's checkout: `mol.toml` (the pinned
one a checkout writes, which names each member's commit id), the prompts, each member's files
under its folder (`router/`, `summary/`, an expert's label), and each member's bundle as
`FOLDER/model.sig` (model_signing ignores only the top folder's `model.sig`, so the members'
are files of the statement: their sha256 binds the members' signatures). The predicate names
the set's commit (`mint.commit`), as a signed adapter commit's does. A checkout of a signed
set writes that bundle as `model.sig` and each member's as `FOLDER/model.sig`, so the
unmodified `model_signing verify` accepts the set's folder and each member's folder.

`mint verify SET` checks the set's bundle against what the repository holds, then each
member's bundle that the set's names, against the trusted keys: one `MemberVerified` a member.
"""

from __future__ import annotations

import hashlib
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from mint.commits import rows
from mint.errors import InvalidSignature, NotVerified, UnsignedMembers
from mint.ids import Kind
from mint.objects import CommitDetail, MemberVerified, Signer, Verification
from mint.sets.layout import layout_items, member_folder
from mint.sets.mol import MOL
from mint.signing import SIGNATURE_FILE
from mint.signing.bundle import Statement, read, read_bundle, sign
from mint.signing.commits import attach, check_one
from mint.signing.trust import COMMITS, SETS

# --- what a set's signature states ---------------------------------------------------------


def sha256(text: str) -> str:
    """The sha256 of a bundle kept as text (its bytes are its UTF-8)."""
    return hashlib.sha256(text.encode()).hexdigest()


def signed_path(member) -> str:
    """Where a set's checkout writes MEMBER's signature, and the statement lists its sha256."""
    return f"{member_folder(member)}/{SIGNATURE_FILE}"


def set_files(detail, member_files: list[dict], member_signatures: list[str]) -> dict[str, str]:
    """path -> sha256 of every file a signed set's checkout holds: DETAIL (a set's
    `CommitDetail` or `NewCommit`) laid out with MEMBER_FILES (path -> FileEntry, one dict a
    member in `detail.members` order), and MEMBER_SIGNATURES (the sha256 of each member's
    bundle, the same order) as each member folder's model.sig."""
    out = {
        path: hashlib.sha256(src).hexdigest() if isinstance(src, bytes) else src
        for path, src in layout_items(detail, member_files)
    }
    for m, digest in zip(detail.members, member_signatures, strict=True):
        out[signed_path(m)] = digest
    return out


@dataclass(frozen=True)
class SetData:
    """A stored set as its signatures are checked: its detail, each member's files and
    bundles (by commit), and its own bundles."""

    detail: CommitDetail
    member_lines: dict[str, str]  # commit -> its line
    member_files: dict[str, dict]  # commit -> path -> FileEntry
    member_bundles: dict[str, list[str]]  # commit -> bundles, oldest first
    bundles: list[str]


def set_data(conn, cid: str) -> SetData:
    detail = rows.detail(conn, cid, tensors="summary")
    ids = list(dict.fromkeys(m.commit_id for m in detail.members))
    return SetData(
        detail,
        {c: rows.commit_row(conn, c).line for c in ids},
        {c: rows.files_of(conn, c) for c in ids},
        {c: rows.signatures_of(conn, c) for c in ids},
        rows.signatures_of(conn, cid),
    )


def stated_members(data: SetData, st: Statement) -> dict[str, str]:
    """commit -> the bundle of that member which ST (a set bundle's statement) names by its
    sha256; ValueError, in words, when a member's is not named or not here."""
    chosen: dict[str, str] = {}
    for m in data.detail.members:
        digest = st.files.get(signed_path(m))
        if digest is None:
            raise ValueError(f"it does not sign member {m.label}'s signature")
        here = [b for b in data.member_bundles[m.commit_id] if sha256(b) == digest]
        if not here:
            raise ValueError(
                f"member {m.label} ({m.commit_id[:12]}) carries no signature {digest[:12]}, "
                "the one the set's signature names"
            )
        if chosen.setdefault(m.commit_id, here[0]) != here[0]:
            raise ValueError(f"it names two signatures of member {m.commit_id[:12]}")
    return chosen


def expected_files(data: SetData, st: Statement) -> tuple[dict[str, str], dict[str, str]]:
    """(the files a bundle stating ST must sign for this set, commit -> member bundle)."""
    chosen = stated_members(data, st)
    members = data.detail.members
    files = set_files(
        data.detail,
        [data.member_files[m.commit_id] for m in members],
        [sha256(chosen[m.commit_id]) for m in members],
    )
    return files, chosen


def attach_set(conn, cid: str, bundle: bytes, where: str, *, unverified=True) -> bool:
    """Keep BUNDLE with set CID if it states exactly the set's files, with its members'
    signatures that are here, and names no other commit (`mint.signing.commits.attach`)."""
    data = set_data(conn, cid)
    st = read(bundle, where)
    try:
        files, _ = expected_files(data, st)
    except ValueError as exc:
        raise InvalidSignature(where, str(exc)) from None
    return attach(conn, cid, files, bundle, where, unverified=unverified)


# --- signing a set ------------------------------------------------------------------------


def member_signatures(b, line: str, members) -> tuple[dict[str, str], dict]:
    """(commit -> the bundle of each member (a `Member` of MEMBERS) that the set's signature
    will name: its oldest signature by a key that verifies it in the repository of backend B,
    commit -> the member's `CommitDetail`). UnsignedMembers, in one line, when any member
    carries none, or none that verifies."""
    chosen: dict[str, str] = {}
    details: dict = {}
    unsigned, failed = [], []
    for m in members:
        if m.commit_id in details:
            continue
        d = details[m.commit_id] = b.show(m.commit_id)
        if SIGNATURE_FILE in d.files:
            raise UnsignedMembers(line, f"member {m.label} has a file named {SIGNATURE_FILE}")
        if not d.signatures:
            unsigned.append(m)
            continue
        try:
            verified = b.verify(m.commit_id)
        except NotVerified as exc:
            failed.append(f"member {m.label} ({m.commit_id[:12]}): {exc.why}")
            continue
        chosen[m.commit_id] = _verified_bundle(d.signatures, verified.signers)
    if unsigned:
        named = ", ".join(f"{m.label} ({m.commit_id[:12]})" for m in unsigned)
        raise UnsignedMembers(line, f"these members are not signed: {named}")
    if failed:
        raise UnsignedMembers(line, failed[0])
    return chosen, details


def _verified_bundle(bundles: list[str], signers: list[Signer]) -> str:
    """The oldest of BUNDLES made by a key among SIGNERS (that verified), as it names it."""
    for bundle in bundles:
        st = read(bundle.encode())
        if any(s.fingerprint == st.hint and s.bound == (st.commit is not None) for s in signers):
            return bundle
    return bundles[0]  # no bundle names its key: the one checkouts write


def sign_set(new, member_files: list[dict], chosen: dict[str, str], private_key, password):
    """The bundle of set NEW (a `NewCommit` or `CommitDetail`) over its layout and its
    members' bundles CHOSEN (commit -> bundle), signed with the key in file PRIVATE_KEY."""
    files = set_files(new, member_files, [sha256(chosen[m.commit_id]) for m in new.members])
    return sign(files, new.line, new.id, private_key, password)


# --- a checkout of a signed set -------------------------------------------------------------


def checkout_signatures(detail, members: list) -> list[tuple[str, bytes]]:
    """What a checkout of set DETAIL writes beside its files: its first bundle as model.sig
    and, in each member's folder, the member bundle that it names (MEMBERS: the members'
    details, in `detail.members` order). Nothing for an unsigned set, or one whose members'
    signatures are not all here."""
    if detail.kind != Kind.SET or not detail.signatures:
        return []
    bundle = detail.signatures[0]
    try:
        st = read(bundle.encode())
    except InvalidSignature:
        return []
    items = [(SIGNATURE_FILE, bundle.encode())]
    for m, d in zip(detail.members, members, strict=True):
        found = [b for b in d.signatures if sha256(b) == st.files.get(signed_path(m))]
        if not found:
            return []
        items.append((signed_path(m), found[0].encode()))
    return items


# --- verify -----------------------------------------------------------------------------------


def verify_set(data: SetData, rev: str, trust) -> Verification:
    """Which trusted keys signed set DATA, each member's signature that the set's names
    verified too; NotVerified with the first reason if none. TRUST(purpose, line): the keys
    (fingerprint -> (name, PEM)) that may sign a set, or a member's commit, there."""
    keys = trust(SETS, data.detail.line)
    if not data.bundles:
        raise NotVerified(rev, "it carries no signature")
    signers, members, misses = [], None, []
    cid = data.detail.id
    with tempfile.TemporaryDirectory(prefix="mint-verify-") as tmp:
        for i, bundle in enumerate(data.bundles):
            scratch = Path(tmp) / str(i)
            scratch.mkdir(mode=0o700)
            try:
                st = read(bundle.encode())
                files, chosen = expected_files(data, st)
                signer = check_one(bundle.encode(), files, keys, cid, scratch / "set")
                verified = _members(data, chosen, trust, scratch)
            except (InvalidSignature, ValueError) as exc:
                misses.append(str(exc))
                continue
            signers.append(signer)
            members = verified if members is None else members
    if not signers:
        raise NotVerified(rev, misses[0])
    return Verification(cid, signers, members or [])


def _members(data: SetData, chosen: dict[str, str], trust, scratch: Path):
    """Each member's bundle CHOSEN verified, over its files and commit, against the keys
    TRUST gives for a commit of its line."""
    done: dict[str, Signer] = {}
    out = []
    for m in data.detail.members:
        cid = m.commit_id
        if cid not in done:
            files = {p: f.sha256 for p, f in data.member_files[cid].items()}
            try:
                where = scratch / f"m{len(done)}"
                keys = trust(COMMITS, data.member_lines[cid])
                done[cid] = check_one(chosen[cid].encode(), files, keys, cid, where)
            except ValueError as exc:
                raise ValueError(f"member {m.label} ({cid[:12]}): {exc}") from None
        out.append(MemberVerified(m.label, cid, done[cid]))
    return out


def verify_set_folder(folder: Path, st: Statement, files: dict, keys, scratch: Path):
    """The members of a set's checkout FOLDER (whose model.sig, stating ST, verified over
    FILES), each member folder's model.sig verified against KEYS over that folder's files and
    the commit the verified mol.toml pins there; ValueError for the first that does not."""
    try:
        mol = tomllib.loads((folder / MOL).read_text(encoding="utf-8"))
        pins = {"router": mol["router"]["adapter"], "summary": mol["summary"]["adapter"]}
        pins |= mol["experts"]
        if not all(isinstance(v, str) for v in pins.values()):
            raise TypeError
    except (OSError, ValueError, KeyError, TypeError):  # TOML and UTF-8 errors are ValueErrors
        raise ValueError(f"its {MOL} does not pin the set's members by commit") from None
    out = []
    for name, cid in pins.items():
        sig = f"{name}/{SIGNATURE_FILE}"
        if sig not in st.files:
            raise ValueError(f"it does not sign member {name}'s signature")
        prefix = f"{name}/"
        member = {p[len(prefix) :]: d for p, d in files.items() if p.startswith(prefix)}
        member.pop(SIGNATURE_FILE)
        try:
            bundle = read_bundle(folder / sig)
            signer = check_one(bundle, member, keys, cid, scratch / f"m{len(out)}")
        except (OSError, ValueError) as exc:
            raise ValueError(f"member {name} ({cid[:12]}): {exc}") from None
        out.append(MemberVerified(name, cid, signer))
    return out


def is_set_statement(st: Statement) -> bool:
    """Whether ST signs a set's checkout (a mol.toml beside members' signatures)."""
    return MOL in st.files and any(p.endswith(f"/{SIGNATURE_FILE}") for p in st.files)
