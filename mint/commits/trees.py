"""A commit's tree: the id of its content (its files, its base and its members), which says
whether a new commit would change anything. Light on purpose: `mint commit` computes one before
the database layer is loaded (mint.commits.early)."""

from __future__ import annotations

from mint.ids import object_id


def tree_id(
    files: dict[str, tuple[str, int]], base_fingerprint: str | None, members: list = ()
) -> str:
    """The tree of FILES (path -> (sha256, size)), a base and MEMBERS ((role, label, commit))."""
    return object_id(
        {
            "files": {p: [sha256, size] for p, (sha256, size) in sorted(files.items())},
            "base": base_fingerprint,
            "members": sorted([role, label, cid] for role, label, cid in members),
        }
    )


def tree_of(files: dict, base_fingerprint: str | None, members: list = ()) -> str:
    """The tree of FILES (path -> FileEntry), a base and MEMBERS (Member)."""
    return tree_id(
        {p: (f.sha256, f.size) for p, f in files.items()},
        base_fingerprint,
        [(m.role, m.label, m.commit_id) for m in members],
    )
