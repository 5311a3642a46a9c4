"""Commits made on this machine and recorded by a backend: an adapter folder, a set from its
mol.toml, a set derived from another, and the candidate sets one step from a channel."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os

from mint.backend import Backend, backend_of
from mint.commits.adapter import CONFIG, WEIGHTS, check_against_base, scan_adapter, walk_adapter
from mint.commits.rows import build_commit, tree_of
from mint.errors import (
    BaseMismatch,
    InvalidConfig,
    MintError,
    NothingToPropose,
    RefConflict,
    RevisionNotFound,
    WrongKind,
)
from mint.ids import CommitId, Kind, Role
from mint.objects import (
    Base,
    Candidate,
    CommitDetail,
    CommitResult,
    FileEntry,
    Member,
    TensorEntry,
)
from mint.porcelain.card import record_card
from mint.refs.revisions import check_name, check_text
from mint.sets.mol import parse_mol
from mint.signing.keys import refuse_private_keys

ROUTER, SUMMARY = "router", "summary"
ANY_HEAD = object()  # `commit`'s expect_head when the commit follows whatever the head is


def commit(
    repo,
    line: str,
    adapter_dir: str | os.PathLike,
    message: str,
    *,
    author: str,
    meta: dict | None = None,
    base: str | None = None,
    provenance: dict | None = None,
    sign: str | os.PathLike | None = None,
    sign_password: str | None = None,
    propose: str | None = None,
    expect_head: str | None | object = ANY_HEAD,
    parents: list[str] | None = None,
) -> CommitResult:
    """Record the PEFT adapter folder as a new commit on LINE (parents: LINE's head, then a
    merge's PARENTS), signed with the private key in file SIGN if given; the folder's
    model.sig is a signature, no file.
    With PROPOSE (a description, '' for none), the commit is offered to LINE as a proposal
    (`refs/pr/N`: the result's `proposal`) and no head moves: its writers merge it.
    EXPECT_HEAD: the head the commit must follow (None: the line must be new), checked and
    then moved by compare-and-swap (RefConflict when the line is elsewhere).

    Everything is checked before anything is published; each byte is read once (in the pass
    that copies it into a local store), and not at all when the stat cache knows the file; only
    the blobs a registry lacks are sent; blobs are durable before the commit that refers to
    them; the head moves by compare-and-swap."""
    b = backend_of(repo)
    check_inputs(line, message, meta)
    signing = _signing(b, adapter_dir, sign, sign_password)
    with b.stat_cache() as cache:
        quick = not (signing or parents or propose is not None or expect_head is not ANY_HEAD)
        same = _same_as_head(b, cache, adapter_dir, line, base) if quick else None
        if same is not None:
            return same
        scanned = scan_adapter(adapter_dir, cache=cache)
        found = b.find_base(scanned.base_name, base)
        check_against_base(scanned.root, scanned.header, found.config, found.name)
        head, head_tree = _head(b, line, Kind.ADAPTER, expect_head)
        if signing:
            scanned = signing.checked(scanned, cache, head, _trusted(b, signing))
        hashed, staged = b.stage_adapter(scanned, cache)
    says = dict(message=message, author=b.acting(author), meta=meta, provenance=provenance)
    new = _adapter_commit(line, head, parents, scanned, hashed, found, says)
    result = _record(b, new, head, head_tree, staged, signing, propose)
    if result.created:
        record_card(b, result, new.files, new.author)
    return result


def _head(b: Backend, line: str, kind: Kind, expect) -> tuple[str | None, str | None]:
    """(head, its tree) of LINE; EXPECT (unless ANY_HEAD) is the head it must be."""
    head, head_tree = b.line_head(line, kind)
    if expect is not ANY_HEAD and head != expect:
        raise RefConflict(f"line {line}", expect, head)
    return head, head_tree


def _adapter_commit(line: str, head, parents, scanned, hashed, found, says: dict):
    """The adapter commit of SCANNED (its files HASHED) on LINE after HEAD (and a merge's
    PARENTS), bound to base FOUND; SAYS: its message, author, meta and provenance."""
    return build_commit(
        Kind.ADAPTER,
        line,
        parents=list(dict.fromkeys(([head] if head else []) + list(parents or []))),
        files={f.path: FileEntry(hashed.blobs[f.path], f.size) for f in scanned.files},
        base=found.name,
        base_fingerprint=found.fingerprint,
        peft=scanned.peft,
        config=scanned.config,
        tensors=tensor_entries(scanned, hashed),
        **says,
    )


def _record(b: Backend, new, head, head_tree, staged, signing, propose=None) -> CommitResult:
    """Record NEW unless it is LINE's head again (or propose it, PROPOSE a description); keep
    the bundles SIGNING makes or found (made first: a key that fails leaves nothing
    recorded)."""
    same = head_tree == new.tree
    if same and propose is not None:
        raise NothingToPropose(new.line)
    bundles = signing.bundles(head if same else new.id, new.files) if signing else []
    if propose is None and not same:  # the bundles kept in the commit's own transaction
        return b.record(new, head, staged, signatures=bundles)
    if propose is not None:
        result = b.propose(new, head, staged, propose)
    else:
        result = CommitResult(CommitId(head), new.line, [], created=False)
    if bundles:  # mint.porcelain.signed is loaded by the commits that sign
        from mint.porcelain.signed import keep

        result = dataclasses.replace(result, signed=keep(b, result.id, bundles))
    return result


def _trusted(b: Backend, signing) -> dict:
    """fingerprint -> (name, PEM) of every key B's repository trusts, when SIGNING kept a
    folder's model.sig (checked against them before anything is stored); else {}."""
    if signing.found is None:
        return {}
    return {k.fingerprint: (k.name, k.public_key.encode()) for k in b.key_ls()}


def _signing(b: Backend, folder, key, password: str | None):
    """What the commit of FOLDER will carry (mint.signing.commits.Signing), or None; a
    private key among FOLDER's files is refused. Signed here, for a registry too: only the
    bundle is sent, with the commit."""
    refuse_private_keys(folder)
    if key is None and not os.path.isfile(os.path.join(folder, "model.sig")):
        return None
    from mint.signing.commits import Signing

    return Signing.of(folder, key, password)


def _same_as_head(b: Backend, cache, folder, line: str, base) -> CommitResult | None:
    """Nothing to commit, from the stat cache alone: every file known, and with the base they
    make the tree of LINE's head. Nothing is read, and nothing checked: nothing will be written,
    and these bytes were checked when they were committed. None: take the long way (which also
    raises whatever error this way met)."""
    try:
        _, files, _ = walk_adapter(folder)
    except MintError:
        return None
    known = {f.path: cache.get(f.abspath, f.stat) for f in files}
    if None in known.values() or known[CONFIG].head is None:
        return None
    try:
        config = json.loads(known[CONFIG].head)
        named = config.get("base_model_name_or_path")
        found = b.find_base(named if isinstance(named, str) else None, base)
        head, head_tree = b.line_head(line, Kind.ADAPTER)
    except (MintError, ValueError, AttributeError):
        return None
    entries = {f.path: FileEntry(known[f.path].blob, f.size) for f in files}
    if head is None or tree_of(entries, found.fingerprint) != head_tree:
        return None
    return CommitResult(CommitId(head), line, [], created=False)


def check_inputs(line: str, message: str, meta: dict | None = None) -> None:
    """The line's name, and the free text a commit stores."""
    check_name("line", line)
    check_text("message", message)
    for key, value in (meta or {}).items():
        check_text("metadata", f"{key}={value}")


def tensor_entries(scanned, hashed) -> list[TensorEntry]:
    """Each tensor of the weights file, with its hash, where it lies and how large it is."""
    return [
        TensorEntry(
            t.name,
            t.dtype,
            list(t.shape),
            hashed.tensor_hashes[t.name],
            t.nbytes,
            WEIGHTS,
            t.start,
        )
        for t in scanned.header.tensors
    ]


# --- sets ------------------------------------------------------------------------------


def set_commit(
    repo,
    path: str | os.PathLike,
    message: str,
    *,
    author: str,
    provenance: dict | None = None,
    sign: str | os.PathLike | None = None,
    sign_password: str | None = None,
) -> CommitResult:
    """Pin every member of mol.toml to an adapter commit, store the prompts, and record a
    set commit; signed with the private key in file SIGN if given, over its members'
    signatures (each member must carry one that verifies: mint.signing.sets)."""
    from mint.porcelain.signed import keep, set_signature
    from mint.sets.pinning import pinned_config, read_prompt, roles

    b = backend_of(repo)
    check_text("message", message)
    _check_key(sign, sign_password)
    mol = parse_mol(path)
    prompts = {p: read_prompt(mol.folder, p) for p in (mol.route_prompt, mol.summary_prompt)}
    base = b.get_base(mol.base)
    members = [pin_member(b, role, label, ref, base) for role, label, ref in roles(mol)]
    head, head_tree = b.line_head(mol.name, Kind.SET)
    new = build_commit(
        Kind.SET,
        mol.name,
        parents=[head] if head else [],
        files={p: FileEntry(hashlib.sha256(d).hexdigest(), len(d)) for p, d in prompts.items()},
        base=base.name,
        base_fingerprint=base.fingerprint,
        message=message,
        author=b.acting(author),
        provenance=provenance,
        config=pinned_config(mol, members),
        members=members,
    )
    if head_tree == new.tree:  # signed, the head is signed
        signed = [set_signature(b, b.show(head), sign, sign_password)] if sign else []
        return CommitResult(head, mol.name, [], created=False, signed=keep(b, head, signed))
    # signed before it is recorded, and kept in its transaction: a member not signed, a key
    # that fails or a bundle refused stores nothing
    bundles = [set_signature(b, new, sign, sign_password)] if sign else []
    return b.record(new, head, b.stage_bytes(list(prompts.values())), signatures=bundles)


def _check_key(key, password: str | None) -> None:
    """Load the key in file KEY now, so that a wrong one fails before anything is stored."""
    if key is not None:
        from mint.signing.bundle import check_private_key

        check_private_key(key, password)


def pin_member(b: Backend, role: Role, label: str, ref: str, base: Base) -> Member:
    """ROLE LABEL = REF resolved to an adapter commit on the set's BASE."""
    d = b.show(ref)
    if d.kind != Kind.ADAPTER:
        raise WrongKind(f"{role} {label} = {ref!r} is a {d.kind} commit, not an adapter")
    if d.base_fingerprint != base.fingerprint:
        raise BaseMismatch(
            f"{role} {label} = {ref!r} is bound to base {d.base} ({d.base_fingerprint[:12]}), "
            f"but the set's base is {base.name} ({base.fingerprint[:12]})"
        )
    return Member(role, label, d.id, ref)


def set_derive(
    repo,
    rev: str,
    uses: dict[str, str],
    *,
    message: str | None = None,
    author: str,
    sign: str | os.PathLike | None = None,
    sign_password: str | None = None,
    propose: str | None = None,
) -> CommitResult:
    """Commit REV's set with the members USES names (label -> adapter revision) replaced, on
    REV's line. Its first parent is REV; when REV is not the line's head, the head is the
    second, so every head still descends from the one before. A set of the line with exactly
    this content is answered instead (created False). SIGN: as `set_commit`'s. PROPOSE (a
    description): offer it to the set's line as a proposal instead (a team offers its new
    expert to the set's owners), as `commit`'s."""
    from mint.porcelain.signed import keep, set_signature

    b = backend_of(repo)
    if not uses:
        raise InvalidConfig("a derived set replaces at least one member")
    check_text("message", message)
    _check_key(sign, sign_password)
    detail = _set_detail(b, rev)
    base = b.get_base(detail.base)
    new = {lab: pin_member(b, role_of(detail, lab), lab, ref, base) for lab, ref in uses.items()}
    members = [new.get(m.label, m) for m in detail.members]
    head, _ = b.line_head(detail.line, Kind.SET)
    existing = b.existing(detail.line, Kind.SET, _tree(detail, members))
    if propose is not None and existing is not None and existing == head:
        raise NothingToPropose(detail.line)
    if existing is not None and propose is None:  # a proposal is a new commit, always
        signed = [set_signature(b, b.show(existing), sign, sign_password)] if sign else []
        return CommitResult(
            existing, detail.line, [], created=False, signed=keep(b, existing, signed)
        )
    derived = _derived(detail, new, members, head, message, b.acting(author))
    bundles = [set_signature(b, derived, sign, sign_password)] if sign else []
    if propose is None:  # the bundles kept in the commit's own transaction
        return b.record(derived, head, b.stage_bytes([]), signatures=bundles)
    result = b.propose(derived, head, b.stage_bytes([]), propose)
    return dataclasses.replace(result, signed=keep(b, result.id, bundles))


def _derived(detail: CommitDetail, new: dict, members: list, head, message, author: str):
    """The set commit that derives from DETAIL, the members NEW names (label -> Member)
    swapped in, on its line after HEAD."""
    pins = {label: m.commit_id for label, m in new.items()}
    what = ", ".join(f"{label}={cid[:12]}" for label, cid in pins.items())
    return build_commit(
        Kind.SET,
        detail.line,
        parents=[detail.id] + ([head] if head and head != detail.id else []),
        files=detail.files,
        base=detail.base,
        base_fingerprint=detail.base_fingerprint,
        message=message or f"derived from {detail.id[:12]}: {what}",
        author=author,
        provenance={"derived_from": detail.id, "uses": pins},
        config=derived_config(detail.config, pins),
        members=members,
    )


def derived_config(config: dict, pins: dict[str, str]) -> dict:
    """A set's pinned configuration with the members PINS names (label -> commit) replaced."""
    out = copy.deepcopy(config)
    for label, cid in pins.items():
        if label in (ROUTER, SUMMARY):
            out[label]["adapter"] = cid
        else:
            out["experts"][label] = cid
    return out


def candidates(
    repo, ref: str, lines: list[str] | None = None, merges: list[str] | tuple = ()
) -> list[Candidate]:
    """The holder of SET_LINE@CHANNEL with each member line's head swapped in, one line at
    a time, then all of them together; only swaps that change something. LINES limits the
    lines swapped (each must be a line some member comes from). MERGES (methods) adds, for
    each, a merge of a member with its line's newer head (mint.porcelain.merge)."""
    b = backend_of(repo)
    set_line, _, channel = ref.partition("@")
    if not set_line or not channel:
        raise RevisionNotFound(ref, "expected SET_LINE@CHANNEL")
    try:
        holder = b.resolve(ref)
    except RevisionNotFound:
        raise RevisionNotFound(ref, "unknown channel") from None
    detail = _set_detail(b, holder)
    sources = {m.label: b.log(m.commit_id, 1)[0].line for m in detail.members}
    swaps = [_swap(b, detail, sources, line) for line in _lines(sources, lines)]
    swaps = [s for s in swaps if s is not None]
    if len(swaps) > 1:
        merged = {label: cid for uses, _ in swaps for label, cid in uses.items()}
        swaps.append((merged, [line for _, used in swaps for line in used]))
    found = [candidate_of(b, detail, uses, used) for uses, used in swaps]
    if merges:
        from mint.porcelain.merge import merge_candidates

        found += merge_candidates(b, detail, sources, lines, merges)
    return found


def _lines(sources: dict[str, str], wanted: list[str] | None) -> list[str]:
    known = list(dict.fromkeys(sources.values()))
    if not wanted:
        return known
    for line in wanted:
        if line not in known:
            raise InvalidConfig(
                f"no member of the set comes from line {line} (they come from {', '.join(known)})"
            )
    return list(dict.fromkeys(wanted))


def _swap(b: Backend, detail: CommitDetail, sources: dict[str, str], line: str):
    """(label -> LINE's head, [LINE]) for the members from LINE that the head changes."""
    head, _ = b.line_head(line, Kind.ADAPTER)
    current = members_of(detail)
    uses = {lab: head for lab, src in sources.items() if src == line and current[lab] != head}
    return (uses, [line]) if uses else None


def candidate_of(
    b: Backend, detail: CommitDetail, uses: dict, used: list[str], description=None, merges=None
) -> Candidate:
    """DETAIL's set with USES (label -> commit) swapped in, from the lines USED."""
    members = members_of(detail) | uses
    changed = [label for label in members if label in uses]
    what = ", ".join(f"{label} {members[label][:12]}" for label in changed)
    description = description or f"{' + '.join(used)} head{'s' if len(used) > 1 else ''}: {what}"
    pinned = [dataclasses.replace(m, commit_id=members[m.label]) for m in detail.members]
    existing = b.existing(detail.line, Kind.SET, _tree(detail, pinned))
    return Candidate(description, detail.id, members, changed, used, existing, merges or {})


def members_of(detail: CommitDetail) -> dict[str, str]:
    """label -> commit of a set's members: router first, the experts, summary last."""
    order = {Role.ROUTER: 0, Role.EXPERT: 1, Role.SUMMARY: 2}
    experts = {label: i for i, label in enumerate(detail.config["router"]["labels"])}
    ms = sorted(detail.members, key=lambda m: (order[m.role], experts.get(m.label, 0)))
    return {m.label: m.commit_id for m in ms}


def _tree(detail: CommitDetail, members: list[Member]) -> str:
    return tree_of(detail.files, detail.base_fingerprint, members)


def role_of(detail: CommitDetail, label: str) -> Role:
    if label == ROUTER:
        return Role.ROUTER
    if label == SUMMARY:
        return Role.SUMMARY
    if label in detail.config["router"]["labels"]:
        return Role.EXPERT
    known = ", ".join(members_of(detail))
    raise InvalidConfig(f"set {detail.id[:12]} has no member labelled {label!r} ({known})")


def _set_detail(b: Backend, rev: str) -> CommitDetail:
    detail = b.show(rev)
    if detail.kind != Kind.SET:
        raise WrongKind(f"{detail.id[:12]} is an {detail.kind} commit, not a set")
    return detail
