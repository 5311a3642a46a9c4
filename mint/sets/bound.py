"""A set commit's config is bound to its members: `mint set commit` writes the config from
mol.toml and the pinned members (`pinned_config`), and the id hashes the members but not the
config. So a set that arrives (push, fetch, clone) or is stored (fsck) is checked by
rebuilding it: the config must parse as mol.toml parses, name exactly the members, and be
what `pinned_config` makes of it. Serving and checkout read the config; without this a
config could name commits that are no member (and so escape the member line checks)."""

from __future__ import annotations

from pathlib import Path

from mint.errors import InvalidConfig
from mint.objects import FileEntry, Member
from mint.sets.mol import mol_from_table
from mint.sets.pinning import pinned_config, roles

SOURCE = "the set's config"


def check_bound(
    line: str, base: str | None, files: dict[str, FileEntry], config, members: list[Member]
) -> None:
    """Refuse (InvalidConfig, naming the first difference) a set whose CONFIG is not what
    `mint set commit` would have written for its LINE, BASE, prompt FILES and MEMBERS."""
    if not isinstance(config, dict):
        raise InvalidConfig(f"{SOURCE} is {type(config).__name__}, not a table")
    mol = mol_from_table(config, Path("."), SOURCE)
    if mol.name != line:
        raise InvalidConfig(f"{SOURCE} names the set {mol.name!r}, its commit is on {line!r}")
    if mol.base != base:
        raise InvalidConfig(f"{SOURCE} names base {mol.base!r}, its commit {base!r}")
    want = {(role, label): ref for role, label, ref in roles(mol)}
    have = {(m.role, m.label): m.commit_id for m in members}
    for (role, label), cid in want.items():
        if (role, label) not in have:
            raise InvalidConfig(f"{SOURCE} names {role} {label}, but no member is")
        if have[role, label] != cid:
            raise InvalidConfig(
                f"{role} {label} is {have[role, label][:12]} among the members, "
                f"{str(cid)[:12]} in {SOURCE}"
            )
    extra = [f"{role} {label}" for role, label in have if (role, label) not in want]
    if extra:
        raise InvalidConfig(f"member {extra[0]} is not in {SOURCE}")
    where = first_difference(pinned_config(mol, members), config)
    if where is not None:
        raise InvalidConfig(f"{SOURCE} differs from what `mint set commit` writes at {where}")
    prompts = {mol.route_prompt, mol.summary_prompt}
    if set(files) != prompts:
        raise InvalidConfig(
            f"a set's files are its prompts {sorted(prompts)}, not {sorted(files)}"
        )


def first_difference(want, got, at: str = "") -> str | None:
    """The first key path where GOT differs from WANT, or None when they are equal."""
    if isinstance(want, dict) and isinstance(got, dict):
        for key in [*want, *(k for k in got if k not in want)]:
            path = f"{at}.{key}" if at else str(key)
            if key not in want or key not in got:
                return path
            inner = first_difference(want[key], got[key], path)
            if inner is not None:
                return inner
        return None
    if type(want) is not type(got) or want != got:
        return at or "the top"
    return None
