"""Signing on this machine, for a local repository or a registry (issue 23): a set's
signature made over its members' signatures, and a folder verified against the repository's
trusted keys. The private key never leaves this machine: only the bundle it made is sent."""

from __future__ import annotations

import difflib
import os

from mint.backend import Backend, backend_of
from mint.errors import InvalidKey, RevisionNotFound
from mint.objects import Verification
from mint.signing.commits import verify_folder_with
from mint.signing.keys import fingerprint, parse_public
from mint.signing.sets import member_signatures, sign_set
from mint.signing.trust import COMMITS, SETS


def set_signature(b: Backend, target, private_key, password: str | None) -> bytes:
    """The bundle of set TARGET (the `NewCommit` about to be recorded, or the line's head's
    `CommitDetail`), over its layout and the members' signatures that verify in B's
    repository, signed with the key in file PRIVATE_KEY (checked already)."""
    chosen, details = member_signatures(b, target.line, target.members)
    files = [details[m.commit_id].files for m in target.members]
    return sign_set(target, files, chosen, private_key, password)


def keep(b: Backend, commit: str, bundles: list[bytes]) -> int:
    """Keep BUNDLES with COMMIT: in the local database, or sent to the registry (which checks
    them as it checks those a push brings). Returns how many were kept (none: each adds
    nothing to what COMMIT carries)."""
    if not bundles:
        return 0
    return b.attach_signatures(commit, [x.decode() for x in bundles])


def verify_folder(
    repo, folder: str | os.PathLike, *, key: str | None = None, public_key: str | None = None
) -> Verification:
    """Which of the repository's trusted keys (or only KEY, by name, or PUBLIC_KEY, a PEM,
    trusted or not) signed FOLDER as its model.sig says, every file hashed again here (as
    `model_signing verify` does); a set's checkout with each member folder's model.sig. A
    registry's trusted keys are its public keys, read from it (`key ls`)."""
    return verify_folder_with(folder, trusted(backend_of(repo), key, public_key))


def trusted(b: Backend, key: str | None, public_key: str | None) -> dict:
    """fingerprint -> (name, PEM) of the keys to check with."""
    if public_key is not None:
        pem = parse_public(public_key)
        return {fingerprint(pem): ("", pem)}
    keys = {}
    for k in b.key_ls():
        if k.purposes is not None and not {COMMITS, SETS} & set(k.purposes):
            continue  # a key that signs moves only signs no folder (mint.signing.trust)
        pem = k.public_key.encode()
        if fingerprint(pem) != k.fingerprint:
            raise InvalidKey(k.name, "its public key does not match its fingerprint")
        keys[k.fingerprint] = (k.name, pem)
    if key is None:
        return keys
    found = {fp: v for fp, v in keys.items() if v[0] == key}
    if not found:
        names = [name for name, _ in keys.values()]
        near = difflib.get_close_matches(key, names, n=3)
        raise RevisionNotFound(key, "no trusted key named", near)
    return found
