"""A hub repository's `model.sig`, as `mint pull` keeps and verifies it (issue 23).

A repository signed with the OpenSSF model-signing format (`model_signing sign DIR`, or a mint
checkout uploaded as it is) holds its bundle as `model.sig` beside the adapter's files. A pull
fetches it with them and keeps it as the commit's signature, after checking, as a commit
checks a folder's model.sig and before anything is stored, that it signs exactly the files
pulled (paths and sha256, every byte hashed here). Asked to verify (`--verify-signature`), the
pull also checks the signature with the keys given (cryptography, as `mint verify` does) and
refuses a repository whose signature is missing or does not verify.
"""

from __future__ import annotations

import os
from pathlib import Path

from mint.errors import InvalidSignature, NotVerified
from mint.objects import Signer
from mint.signing import SIGNATURE_FILE
from mint.signing.bundle import read, read_bundle, verify_with
from mint.signing.commits import differences
from mint.store import sha256_file

UNSIGNED = f"it carries no signature (no {SIGNATURE_FILE})"


def staged_digests(folder: Path) -> dict[str, str]:
    """Every file under FOLDER but its model.sig (path -> sha256), hashed now."""
    out = {}
    for dirpath, _, names in os.walk(folder):
        for name in names:
            path = Path(dirpath) / name
            rel = path.relative_to(folder).as_posix()
            if rel != SIGNATURE_FILE:
                out[rel] = sha256_file(path)
    return out


def check_staged(folder: Path, where: str, keys: dict | None) -> Signer | None:
    """FOLDER's model.sig (a staged adapter folder from hub location WHERE), checked: it signs
    exactly FOLDER's files and no mint commit (a pull makes a new one); with KEYS
    (fingerprint -> (name, PEM): verification asked), its signature verified by one of them.
    None when FOLDER has no model.sig and no verification is asked."""
    path = folder / SIGNATURE_FILE
    if not path.is_file():
        if keys is not None:
            raise NotVerified(where, UNSIGNED)
        return None
    shown = f"{where}/{SIGNATURE_FILE}"
    bundle = read_bundle(path)
    st = read(bundle, shown)
    files = staged_digests(folder)
    wrong = differences(st.files, files, "not pulled")
    if wrong:
        raise InvalidSignature(shown, f"it does not sign these files ({wrong})")
    if st.commit is not None:
        why = f"it was made for mint commit {st.commit[:12]}, not the one a pull makes"
        raise InvalidSignature(shown, f"{why} (push that commit to a registry instead)")
    if keys is None:
        return None
    return _verified(bundle, st.hint, files, keys, where)


def verify_bundles(bundles: list[bytes], files: dict, keys: dict, where: str, commit: str):
    """The key of KEYS that signed one of BUNDLES (a commit's signatures) over FILES, the
    commit COMMIT's; NotVerified with the first one's reason if none did."""
    if not bundles:
        raise NotVerified(where, "it carries no signature")
    misses = []
    for bundle in bundles:
        try:
            st = read(bundle, where)
            if st.commit is not None and st.commit != commit:
                raise NotVerified(where, f"its signature was made for commit {st.commit[:12]}")
            wrong = differences(st.files, files, "not pulled")
            if wrong:
                raise NotVerified(where, f"its signature does not cover these files: {wrong}")
            return _verified(bundle, st.hint, files, keys, where, st.commit is not None)
        except (InvalidSignature, NotVerified) as exc:
            misses.append(exc)
    raise misses[0]


def _verified(bundle: bytes, hint, files: dict, keys: dict, where: str, bound=False) -> Signer:
    """The key of KEYS whose signature BUNDLE carries over FILES, else NotVerified."""
    candidates = [hint] if hint in keys else ([] if hint else list(keys))
    if not candidates:
        who = f"key {hint[:16]}" if hint else "a key"
        given = all(name == "" for name, _ in keys.values())
        raise NotVerified(where, f"it is signed by {who}, not by {_keys_named(keys, given)}")
    for fp in candidates:
        name, pem = keys[fp]
        try:
            signed = verify_with(bundle, pem)
        except ValueError:
            continue
        if differences(signed, files, "not pulled") is None:
            return Signer(name, fp, bound)
    raise NotVerified(where, "its signature does not verify with the key it names")


def _keys_named(keys: dict, given: bool) -> str:
    if given:
        return "the key given"
    names = sorted(name for name, _ in keys.values())
    return f"a key trusted here ({', '.join(names)})" if names else "a key trusted here (none)"
