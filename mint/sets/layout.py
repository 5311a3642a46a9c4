"""How a set lays out on disk: mol.toml, its prompts, and one folder per member."""

from __future__ import annotations

from mint.commits import rows
from mint.ids import Role
from mint.objects import CommitDetail, Member
from mint.sets.mol import MOL, render_mol


def member_folder(m: Member) -> str:
    """An expert's folder is its label; the router's and the summary's are their roles."""
    return m.label if m.role == Role.EXPERT else str(m.role)


def set_layout(conn, detail: CommitDetail) -> list[tuple[str, str | bytes]]:
    """(path, blob id or bytes) for a set checkout: mol.toml with commit ids, the prompts,
    and a folder per member with its adapter files."""
    plan: list[tuple[str, str | bytes]] = [(MOL, render_mol(detail.config).encode())]
    plan += [(p, f.sha256) for p, f in detail.files.items()]
    for m in detail.members:
        plan += [
            (f"{member_folder(m)}/{p}", f.sha256)
            for p, f in rows.files_of(conn, m.commit_id).items()
        ]
    return plan
