"""What each page shows, gathered with the same `mint.api` calls the JSON API makes (and the
same token checks): one function per page, returning the template's context."""

from __future__ import annotations

import difflib

from mint import api
from mint.errors import RevisionNotFound
from mint.ids import Kind, RefKind
from mint.objects import CommitDetail, Diff
from mint.registry.auth import check_line, check_rev, visible, visible_page
from mint.registry.web import lineage, queries
from mint.registry.web.approvals import approved_at
from mint.registry.web.card import card_of, read_text
from mint.registry.web.channel_api import ChannelView, TimelineEntry, channel_view, timeline
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
        read = lambda n, past: api.ls(repo, limit=n, after=past)  # noqa: E731
        found = visible_page(who, read, LINES + 1, after, lambda i: i.name)
    more = found[LINES - 1].name if len(found) > LINES else None
    found = found[:LINES]
    names = [i.name for i in found]
    channels = queries.holders(repo, names)
    tags = queries.newest_tags(repo, names)
    rows = [
        {"line": i, "tags": tags.get(i.name, ([], 0)), "channels": channels.get(i.name, {})}
        for i in found
    ]
    shown = [i.head for i in found] + [t for r in rows for t in r["channels"].values()]
    return {"rows": rows, "q": q, "next": more, "first": after is None} | known(repo, shown)


def known(repo: Repo, ids) -> dict:
    """The `known` commits a page's template shows beside each id (message, author, tags)."""
    return {"known": queries.summaries(repo, ids)}


def line_page(repo: Repo, who: Identity, line: str, after: str | None) -> dict:
    """One page of LINE's commits newest first, from its head or from the commit AFTER (the
    first of the page: keyset paging, one walk of at most PAGE + 1 commits)."""
    check_line(who, line)
    info = queries.line_info(repo, line)
    if info is None:
        raise RevisionNotFound(line, "no such line")
    try:
        commits = api.log(repo, after or line, PAGE + 1) if info.head else []
    except RevisionNotFound:
        if after is None:
            raise
        raise RevisionNotFound(after, f"not a commit of line {line}") from None
    if commits and commits[0].line != line:
        raise RevisionNotFound(after or line, f"not a commit of line {line}")
    more = commits[PAGE].id if len(commits) > PAGE else None
    commits = commits[:PAGE]
    tags, channels = queries.badges(repo, line, [c.id for c in commits])
    holders = api.tag_list(repo, line, RefKind.CHANNEL)
    return {
        "line": info,
        "commits": commits,
        "next": more,
        "first": after is None,
        "tags": tags,
        "channels": channels,
        "holders": holders,
        "graph": lineage.layout(commits),
    } | known(repo, [info.head] + [h.target for h in holders])


def commit_page(repo: Repo, who: Identity, rev: str) -> dict:
    """Everything recorded for one commit, its evaluations, and where its channels stand."""
    check_rev(repo, who, rev)
    detail = api.show(repo, rev)
    check_line(who, detail.line)
    evals = api.evaluations_of(repo, detail.id)
    held = [
        c.name for c in api.tag_list(repo, detail.line, RefKind.CHANNEL) if c.target == detail.id
    ]
    shown = detail.parents + [m.commit_id for m in detail.members]
    shown += _strings(detail.provenance) + _strings(detail.meta)  # a derived set's, say
    return {
        "c": detail,
        "evaluations": [api.evaluation_checks(repo, e) for e in evals],
        "held": held,
        "set": _set_view(repo, detail) if detail.kind == Kind.SET else None,
        "card": card_of(repo.store, detail.files),
    } | known(repo, shown)


def _strings(value: object) -> list[str]:
    """The strings in VALUE (a recorded mapping): those that are commit ids show as commits."""
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) and len(value) == 64 else []


def proposal_page(repo: Repo, who: Identity, line: str, number: int) -> dict:
    """A proposal: what it changes against the line's head, its evaluations, and the gate of
    each channel a contract guards on the line, for its commit (the gate after a merge)."""
    check_line(who, line)
    d = api.proposal_show(repo, line, number)
    check_rev(repo, who, d.proposal.commit_id)
    evals = [api.evaluation_checks(repo, e) for e in d.evaluations]
    shown = [d.proposal.commit_id, d.head, d.proposal.base]
    return {"d": d, "p": d.proposal, "evaluations": evals} | known(repo, [x for x in shown if x])


def _set_view(repo: Repo, detail: CommitDetail) -> dict:
    """A set's protocol, labels and prompts (the prompts' text from the store); its members
    are the commit's."""
    cfg = detail.config or {}
    router = cfg.get("router", {})
    prompts = {}
    for path in _prompts(detail):
        if path in detail.files:
            prompts[path] = _text(repo, detail.files[path].sha256)
    return {
        "protocol": cfg.get("protocol"),
        "labels": router.get("labels", []),
        "default": router.get("default"),
        "prompts": prompts,
    }


def _text(repo: Repo, blob: str, limit: int = 16_384) -> str:
    text, more = read_text(repo.store, blob, limit)
    return text + ("\n…" if more else "")


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
    shown = known(repo, [d.a, d.b, *(x for pair in d.members.values() for x in pair)])
    sets = all(getattr(shown["known"].get(x), "kind", None) == Kind.SET for x in (d.a, d.b))
    return {
        "d": d,
        "changed": changed,
        "sort": sort if sort in SORTS else "name",
        "ra": a,
        "rb": b,
        "set": _set_diff(repo, d) if sets else None,
    } | shown


def _set_diff(repo: Repo, d: Diff) -> dict:
    """Two sets' difference as a release owner reads it: each member that moved (old commit,
    new commit), labels added and removed, the default, the prompts' text as a unified diff,
    and the other keys of mol.toml that changed."""
    ca, cb = api.show(repo, d.a), api.show(repo, d.b)
    ra, rb = (ca.config or {}).get("router", {}), (cb.config or {}).get("router", {})
    la, lb = ra.get("labels", []), rb.get("labels", [])
    members = [(*key.split(":", 1), old, new) for key, (old, new) in sorted(d.members.items())]
    return {
        "members": members,
        "added": [x for x in lb if x not in la],
        "removed": [x for x in la if x not in lb],
        "default": (ra.get("default"), rb.get("default")),
        "prompts": _prompt_diffs(repo, ca, cb, d),
        "other": {k: v for k, v in d.config.items() if k not in _SET_PARTS},
    }


_SET_PARTS = ("router", "experts", "summary")


def _prompt_diffs(repo: Repo, ca: CommitDetail, cb: CommitDetail, d: Diff) -> dict[str, str]:
    """Path -> unified diff of each prompt file the two sets do not share byte for byte."""
    out = {}
    for path in sorted(_prompts(ca) | _prompts(cb)):
        if path not in d.files:
            continue
        old, new = (_text(repo, c.files[path].sha256) if path in c.files else "" for c in (ca, cb))
        lines = difflib.unified_diff(
            old.splitlines(), new.splitlines(), f"a/{path}", f"b/{path}", lineterm=""
        )
        out[path] = "\n".join(lines)
    return out


def _prompts(detail: CommitDetail) -> set[str]:
    cfg = detail.config or {}
    return {p for part in ("router", "summary") if (p := cfg.get(part, {}).get("prompt"))}


def channel_page(repo: Repo, who: Identity, ref: str, before: int | None) -> dict:
    """LINE@CHANNEL: its holder, a page of its moves newest first with the evidence of each,
    the pending approvals, and the gate for the line's head when it does not hold it (the
    same view as `GET /api/v1/channel`), with when WHO approved that head (MINE: None, the
    page offers the approval)."""
    v = channel_view(repo, who, ref, MOVES, before)
    moved = [x for e in v.moves for x in (e.move.to, e.move.from_)]
    shown = [v.holder, v.head, *moved, *(a.commit_id for a in v.pending)]
    mine = approved_at(repo, v.head, v.channel, who.name) if v.gate else None
    context = {"v": v, "ref": ref, "first": before is None, "held": _held(repo, v), "mine": mine}
    return context | known(repo, shown)


def _held(repo: Repo, v: ChannelView) -> TimelineEntry | None:
    """The move that put the holder there, with its evidence (None: nothing holds it)."""
    move = queries.holder_move(repo, v.line, v.channel) if v.holder else None
    if move is None:
        return None
    on_page = next((e for e in v.moves if e.move.id == move.id), None)
    return on_page or timeline(repo, [move])[0]
