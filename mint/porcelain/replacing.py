"""`mint checkout --force`: a folder is replaced only when it holds an earlier checkout, as that
checkout wrote it.

"An earlier checkout" is decided by content, never by a marker the checkout would have to leave
among the files it writes byte for byte: the folder holds exactly the files a checkout of some
commit of the same line writes (every path, every byte, nothing more: no file edited, added or
removed since). That commit is found by the folder's tree (`mint.commits.trees`, one indexed
lookup, here or on a registry): an adapter's files, or a set's prompts and the members its
checked-out mol.toml pins. Anything else (a folder of one's own, a checkout edited since, a
checkout of another line) is refused, and nothing in it is touched."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from mint.backend import Backend
from mint.commits.trees import tree_id
from mint.errors import InvalidConfig, NotACheckout
from mint.ids import Kind
from mint.objects import CommitDetail
from mint.sets.layout import layout_items
from mint.sets.mol import MOL, parse_mol_text
from mint.sets.pinning import roles
from mint.signing import SIGNATURE_FILE, signature_items
from mint.store import sha256_file

_HEX = frozenset("0123456789abcdef")


def replace_checkout(b: Backend, dest: Path, detail: CommitDetail, write: Callable):
    """Replace DEST, which must hold an earlier checkout of DETAIL's line, by what WRITE(folder)
    writes into a new folder beside it; DEST is swapped for it only once it is whole (a failure
    leaves DEST as it was). Returns (the commit whose checkout DEST held, what WRITE returned)."""
    held = earlier_checkout(b, dest, detail)
    if held is None:
        raise NotACheckout(str(dest), detail.line)
    fresh = Path(tempfile.mkdtemp(prefix=f".{dest.name}.mint-", dir=dest.parent))
    try:
        os.chmod(fresh, dest.stat().st_mode & 0o7777)  # mkdtemp's 0700 is not the folder's
        written = write(fresh)
        old = fresh.with_name(fresh.name + "-old")
        os.rename(dest, old)
        os.rename(fresh, dest)
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return held, written


def earlier_checkout(b: Backend, dest: Path, detail: CommitDetail) -> str | None:
    """The commit of DETAIL's line whose checkout DEST holds exactly, or None."""
    found = _files(dest)
    if not found:
        return None
    candidate = _candidate(b, dest, detail, found)
    if candidate is None:
        return None
    held = b.show(candidate)
    members = [b.show(m.commit_id) for m in held.members] if held.kind == Kind.SET else []
    items = layout_items(held, [m.files for m in members]) + signature_items(held, members)
    wanted = {p: src if isinstance(src, str) else _sha256(src) for p, src in items}
    return candidate if wanted == {p: sha for p, (sha, _) in found.items()} else None


def _candidate(b: Backend, dest: Path, detail: CommitDetail, found: dict) -> str | None:
    """The commit of DETAIL's line whose content the files FOUND in DEST are, by its tree."""
    if detail.kind == Kind.SET:
        if MOL not in found:
            return None
        try:
            mol = parse_mol_text((dest / MOL).read_text(encoding="utf-8"), dest)
        except (InvalidConfig, OSError, UnicodeDecodeError):
            return None
        members = [(role, label, ref) for role, label, ref in roles(mol)]
        if mol.name != detail.line or not all(_is_id(ref) for _, _, ref in members):
            return None  # a mol.toml of one's own (revisions, not ids): not a checkout
        folders = {"router", "summary", *mol.experts}  # the members' (`member_folder`)
        own = {
            p: v
            for p, v in found.items()
            if p not in (MOL, SIGNATURE_FILE) and p.split("/")[0] not in folders
        }
        tree = tree_id(own, detail.base_fingerprint, members)
    else:
        files = {p: v for p, v in found.items() if p != SIGNATURE_FILE}
        tree = tree_id(files, detail.base_fingerprint)
    return b.existing(detail.line, detail.kind, tree)


def _files(dest: Path) -> dict[str, tuple[str, int]] | None:
    """Every file under DEST as (sha256, size) by its path; None if DEST holds anything but
    folders and regular files (a link, a socket): a checkout writes nothing else."""
    found = {}
    for folder, dirs, names in os.walk(dest):
        for name in [*dirs, *names]:
            if os.path.islink(os.path.join(folder, name)):
                return None
        for name in names:
            path = Path(folder, name)
            if not path.is_file():
                return None
            found[path.relative_to(dest).as_posix()] = (sha256_file(path), path.stat().st_size)
    return found


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _is_id(ref: str) -> bool:
    return len(ref) == 64 and set(ref) <= _HEX
