"""How a commit lays out on disk: an adapter as its files; a set as mol.toml, its prompts, and
one folder per member. One plan, for a checkout, an export and the Hub protocol's file list,
whether the commits come from a local database or a registry."""

from __future__ import annotations

from mint.commits import rows
from mint.ids import Kind, Role
from mint.objects import CommitDetail, FileEntry, Member
from mint.sets.mol import MOL, render_mol


def member_folder(m: Member) -> str:
    """An expert's folder is its label; the router's and the summary's are their roles."""
    return m.label if m.role == Role.EXPERT else str(m.role)


def layout_items(
    detail: CommitDetail, member_files: list[dict[str, FileEntry]]
) -> list[tuple[str, str | bytes]]:
    """(path, blob id or bytes) of every file a checkout of DETAIL writes; MEMBER_FILES are
    the files of each of a set's members, in the order of `detail.members`."""
    if detail.kind != Kind.SET:
        return [(p, f.sha256) for p, f in detail.files.items()]
    plan: list[tuple[str, str | bytes]] = [(MOL, render_mol(detail.config).encode())]
    plan += [(p, f.sha256) for p, f in detail.files.items()]
    for m, files in zip(detail.members, member_files, strict=True):
        plan += [(f"{member_folder(m)}/{p}", f.sha256) for p, f in files.items()]
    return plan


def checkout_items(conn, cid: str) -> list[tuple[str, str | bytes]]:
    """`layout_items` of commit CID of a local database (an adapter's tensor rows unread)."""
    if rows.commit_row(conn, cid).kind != Kind.SET:
        return [(p, f.sha256) for p, f in rows.files_of(conn, cid).items()]
    detail = rows.detail(conn, cid)
    return layout_items(detail, [rows.files_of(conn, m.commit_id) for m in detail.members])
