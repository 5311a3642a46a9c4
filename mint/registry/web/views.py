"""What each page shows, gathered with the same `mint.api` calls the JSON API makes (and the
same token checks): one function per page, returning the template's context."""

from __future__ import annotations

from mint import api
from mint.errors import RevisionNotFound
from mint.ids import Kind, RefKind
from mint.objects import CommitDetail
from mint.registry.auth import check_line, check_rev, visible
from mint.registry.web import lineage, queries
from mint.registry.web.channel_api import channel_view
from mint.repo import Repo
from mint.team.tokens import Identity

PAGE = 50  # commits on a page of a line
LINES = 50  # lines on a page of lines
MOVES = 20  # moves on a page of a channel (as GET /api/v1/channel)
SORTS = {"name", "delta", "-delta"}


def lines_page(repo: Repo, who: Identity, q: str, after: str | None) -> dict:
    """A page of the lines the token may read (after the name AFTER), filtered by Q (a part
    of the name), with kind, head, newest tags and channel holders."""
    if q:
        found = [i for i in api.ls(repo, after=after) if q.casefold() in i.name.casefold()]
        found = visible(who, found, lambda i: i.name)[: LINES + 1]
    else:
        found = visible(who, api.ls(repo, limit=LINES + 1, after=after), lambda i: i.name)
    more = found[LINES - 1].name if len(found) > LINES else None
    found = found[:LINES]
    names = [i.name for i in found]
    channels = queries.holders(repo, names)
    tags = queries.newest_tags(repo, names)
    rows = [
        {"line": i, "tags": tags.get(i.name, ([], 0)), "channels": channels.get(i.name, {})}
        for i in found
    ]
    return {"rows": rows, "q": q, "next": more, "first": after is None}


def line_page(repo: Repo, who: Identity, line: str, after: str | None) -> dict:
    """One page of LINE's commits newest first, from its head or from the commit AFTER (the
    first of the page: keyset paging, one walk of at most PAGE + 1 commits)."""
    check_line(who, line)
    info = queries.line_info(repo, line)
    if info is None:
        raise RevisionNotFound(line, "no such line")
    commits = api.log(repo, after or line, PAGE + 1) if info.head else []
    if commits and commits[0].line != line:
        raise RevisionNotFound(after or line, f"not a commit of line {line}")
    more = commits[PAGE].id if len(commits) > PAGE else None
    commits = commits[:PAGE]
    tags, channels = queries.badges(repo, line, [c.id for c in commits])
    return {
        "line": info,
        "commits": commits,
        "next": more,
        "first": after is None,
        "tags": tags,
        "channels": channels,
        "holders": api.tag_list(repo, line, RefKind.CHANNEL),
        "graph": lineage.layout(commits),
    }


def commit_page(repo: Repo, who: Identity, rev: str) -> dict:
    """Everything recorded for one commit, its evaluations, and where its channels stand."""
    check_rev(repo, who, rev)
    detail = api.show(repo, rev)
    check_line(who, detail.line)
    evals = api.evaluations_of(repo, detail.id)
    held = [
        c.name for c in api.tag_list(repo, detail.line, RefKind.CHANNEL) if c.target == detail.id
    ]
    return {
        "c": detail,
        "evaluations": [api.evaluation_checks(repo, e) for e in evals],
        "held": held,
        "set": _set_view(repo, detail) if detail.kind == Kind.SET else None,
    }


def _set_view(repo: Repo, detail: CommitDetail) -> dict:
    """A set's router, labels, experts and prompts (the prompts' text from the store)."""
    cfg = detail.config or {}
    router, summary = cfg.get("router", {}), cfg.get("summary", {})
    prompts = {}
    for path in (router.get("prompt"), summary.get("prompt")):
        if path in detail.files:
            prompts[path] = _text(repo, detail.files[path].sha256)
    return {
        "protocol": cfg.get("protocol"),
        "router": router.get("adapter"),
        "labels": router.get("labels", []),
        "default": router.get("default"),
        "experts": cfg.get("experts", {}),
        "summary": summary.get("adapter"),
        "prompts": prompts,
    }


def _text(repo: Repo, blob: str, limit: int = 16_384) -> str:
    with repo.store.open(blob) as f:
        data = f.read(limit + 1)
    text = data[:limit].decode("utf-8", errors="replace")
    return text + ("\n…" if len(data) > limit else "")


def diff_page(repo: Repo, who: Identity, a: str, b: str, sort: str) -> dict:
    """What changed from A to B; changed tensors sorted by name or by relative delta."""
    check_rev(repo, who, a)
    check_rev(repo, who, b)
    d = api.diff(repo, a, b)
    changed = list(d.tensors.changed)
    if sort in ("delta", "-delta"):
        changed.sort(key=lambda t: (t.rel_delta is None, t.rel_delta or 0.0, t.name))
        if sort == "-delta":
            changed.reverse()
    return {
        "d": d,
        "changed": changed,
        "sort": sort if sort in SORTS else "name",
        "ra": a,
        "rb": b,
    }


def channel_page(repo: Repo, who: Identity, ref: str, before: int | None) -> dict:
    """LINE@CHANNEL: its holder, a page of its moves newest first with the evidence of each,
    the pending approvals, and the gate for the line's head when it does not hold it (the
    same view as `GET /api/v1/channel`)."""
    return {"v": channel_view(repo, who, ref, MOVES, before), "ref": ref, "first": before is None}
