"""The lineage graph of one page of a line's log: lanes as git draws them, laid out here and
drawn as SVG by the template (so every label is escaped there)."""

from __future__ import annotations

from dataclasses import dataclass

from mint.objects import CommitInfo

ROW, LANE, PAD = 28, 18, 14


@dataclass(frozen=True)
class Node:
    id: str
    x: int
    y: int
    label: str


@dataclass(frozen=True)
class Edge:
    x1: int
    y1: int
    x2: int
    y2: int
    off_page: bool  # the parent is on a later page: the edge runs off the bottom


@dataclass(frozen=True)
class Lineage:
    nodes: list[Node]
    edges: list[Edge]
    width: int
    height: int
    text_x: int


def _lanes(commits: list[CommitInfo]) -> dict[str, int]:
    """Each commit's lane: a commit takes the lane that waits for it (its child's first
    parent), or a new one; a merge's other parents wait in lanes of their own."""
    waiting: list[str | None] = []
    lane_of: dict[str, int] = {}
    for c in commits:
        lane = waiting.index(c.id) if c.id in waiting else _free(waiting)
        waiting = [None if w == c.id else w for w in waiting]
        lane_of[c.id] = lane
        for i, parent in enumerate(c.parents):
            if parent in waiting:
                continue
            slot = lane if i == 0 else _free(waiting)
            waiting[slot] = parent
    return lane_of


def _free(waiting: list[str | None]) -> int:
    if None in waiting:
        return waiting.index(None)
    waiting.append(None)
    return len(waiting) - 1


def layout(commits: list[CommitInfo]) -> Lineage:
    """Nodes top (newest) to bottom, and an edge from each commit to each parent."""
    lane_of = _lanes(commits)
    lanes = max(lane_of.values(), default=0) + 1
    pos = {c.id: (PAD + lane_of[c.id] * LANE, PAD + i * ROW) for i, c in enumerate(commits)}
    height = PAD * 2 + max(len(commits) - 1, 0) * ROW + ROW // 2
    nodes = [
        Node(c.id, *pos[c.id], f"{c.id[:12]}  {c.message.splitlines()[0] if c.message else ''}")
        for c in commits
    ]
    edges = []
    for c in commits:
        x1, y1 = pos[c.id]
        for parent in c.parents:
            if parent in pos:
                edges.append(Edge(x1, y1, *pos[parent], False))
            else:
                edges.append(Edge(x1, y1, x1, height, True))
    text_x = PAD + lanes * LANE
    return Lineage(nodes, edges, text_x + 560, height, text_x)
