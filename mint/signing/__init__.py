"""Signing in the OpenSSF model-signing format (issue 23).

`keys`: key pairs made here (the private key written 0600 and never read back by anything
but the signer) and the public keys a repository trusts, by name. `bundle`: the format, a
Sigstore bundle holding a DSSE envelope holding an in-toto statement that lists every file's
sha256, built from the blob ids a commit already has (no second hashing pass) and signed
offline with an elliptic-curve key, as model_signing's key signer signs it. `commits`: the
bundles a commit carries, checked before they are kept, and `verify`, which says which trusted
key signed a commit or a folder.

Bundles are made and checked with `cryptography` alone (model_signing, which loads sigstore,
is imported by the tests only, which hold the format to it); without cryptography, these say
so in one error (`SigningUnavailable`).
"""

SIGNATURE_FILE = "model.sig"  # where model_signing's CLI writes and reads a folder's bundle


def signature_items(detail, members=()) -> list[tuple[str, bytes]]:
    """What a checkout of DETAIL (a `CommitDetail`) writes beside its files: an adapter
    commit's first signature as model.sig, where `model_signing verify` looks for it; a set's,
    with the members' signatures it names in their folders (MEMBERS: their details)."""
    if detail.kind == "set" and detail.signatures:
        from mint.signing.sets import checkout_signatures

        return checkout_signatures(detail, list(members))
    if detail.kind != "adapter" or not detail.signatures or SIGNATURE_FILE in detail.files:
        return []
    return [(SIGNATURE_FILE, detail.signatures[0].encode())]
