"""What a set commit is made of: its members in order, its prompts read safely, and its pinned
configuration (`mint.porcelain.commit.set_commit` records one; `mint.sets.bound` checks one
that arrives against the same rules)."""

from __future__ import annotations

from pathlib import Path

from mint.commits.adapter import safe_relpath
from mint.errors import InvalidConfig
from mint.ids import Role
from mint.objects import Member
from mint.sets.mol import MOL, MolFile


def roles(mol: MolFile):
    """(role, label, ref as written) for the router, each expert and the summary adapter."""
    yield Role.ROUTER, "router", mol.router
    for label, ref in mol.experts.items():
        yield Role.EXPERT, label, ref
    yield Role.SUMMARY, "summary", mol.summary


def read_prompt(folder: Path, rel: str) -> bytes:
    """A prompt's bytes: a regular file inside FOLDER (no link on the way), UTF-8 text."""
    safe_relpath(rel)
    path = folder
    for part in rel.split("/"):
        path = path / part
        if path.is_symlink():
            raise InvalidConfig(
                f"prompt {rel} is a symbolic link; a set stores regular files only"
            )
    try:
        data = path.read_bytes()
    except OSError:
        raise InvalidConfig(
            f"prompt file {rel} is missing beside {MOL} (looked in {folder})"
        ) from None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidConfig(f"prompt {rel} is not UTF-8 text") from None
    return data


def pinned_config(mol: MolFile, members: list[Member]) -> dict:
    """The set's configuration with every adapter as an exact commit id."""
    by = {(m.role, m.label): m.commit_id for m in members}
    return {
        "name": mol.name,
        "protocol": mol.protocol,
        "base": mol.base,
        "router": {
            "adapter": by[Role.ROUTER, "router"],
            "labels": mol.labels,
            "prompt": mol.route_prompt,
            "default": mol.default,
        },
        "experts": {label: by[Role.EXPERT, label] for label in mol.labels},
        "summary": {"adapter": by[Role.SUMMARY, "summary"], "prompt": mol.summary_prompt},
    }
