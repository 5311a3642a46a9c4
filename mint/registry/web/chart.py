"""A metric over a line's evaluated commits, laid out here and drawn as SVG by the template
(so every name and label is escaped there): one point per commit in order, each named on the
x axis by its tag (else its short id) as far as the labels fit, the contract's bounds as
horizontal lines, and a marker on each commit that holds a channel."""

from __future__ import annotations

import math
from dataclasses import dataclass

from mint.gates.checks import number_text

WIDTH, HEIGHT = 880, 370
LEFT, RIGHT, TOP, BOTTOM = 64, 96, 44, 90  # room for the axes' labels, bounds, channels
INSET = 14  # between the plot's sides and its first and last points (clear of the y labels)
TICKS = 5
GAP = 15  # px between two labels of the x axis (slanted, they need no more)


@dataclass(frozen=True)
class Point:
    commit: str
    x: float
    y: float
    value: float
    held: bool  # the commit holds a channel


@dataclass(frozen=True)
class Bound:
    label: str  # "min 0.8"
    y: float


@dataclass(frozen=True)
class Marker:
    commit: str
    channels: str  # "production, staging"
    x: float
    label_y: float


@dataclass(frozen=True)
class XLabel:
    """A commit's name under its point on the x axis: its tag, else its short id."""

    commit: str
    text: str
    x: float
    tagged: bool


@dataclass(frozen=True)
class Tick:
    label: str
    y: float


@dataclass(frozen=True)
class Chart:
    points: list[Point]
    path: str  # the polyline's points, "x,y x,y ..."
    bounds: list[Bound]
    markers: list[Marker]
    ticks: list[Tick]
    labels: list[XLabel]  # as many as fit, the tagged and the held ones first
    width: int
    height: int
    left: int
    right: int  # the plot's right edge
    top: int
    bottom: int  # the plot's bottom edge


def layout(
    commits: list[str],
    values: dict[str, float],
    bounds: dict[str, float],
    holders: dict[str, list[str]],
    tags: dict[str, list[str]] | None = None,
) -> Chart:
    """COMMITS oldest first; VALUES the metric of those that have a number; BOUNDS the
    contract's {"min": x, "max": y} for the metric; HOLDERS commit -> channels it holds;
    TAGS commit -> its tags (the x axis names a commit by its first tag)."""
    low, high = _range([*values.values(), *bounds.values()])
    right, bottom = WIDTH - RIGHT, HEIGHT - BOTTOM
    if len(commits) == 1:
        step, start = 0.0, (LEFT + right) / 2
    else:
        step, start = (right - LEFT - 2 * INSET) / (len(commits) - 1), LEFT + INSET
    xs = {c: start + i * step for i, c in enumerate(commits)}

    def y(v: float) -> float:
        return round(bottom - (v - low) / (high - low) * (bottom - TOP), 1)

    points = [
        Point(c, round(xs[c], 1), y(values[c]), values[c], c in holders)
        for c in commits
        if c in values
    ]
    markers = [
        Marker(c, ", ".join(holders[c]), round(xs[c], 1), TOP - 8 - 14 * (i % 2))
        for i, c in enumerate(c for c in commits if c in holders)
    ]
    return Chart(
        points=points,
        path=" ".join(f"{p.x},{p.y}" for p in points),
        bounds=[Bound(f"{k} {number_text(v)}", y(v)) for k, v in sorted(bounds.items())],
        markers=markers,
        ticks=[Tick(f"{v:.4g}", y(v)) for v in _ticks(low, high)],
        labels=_labels(commits, xs, tags or {}, holders),
        width=WIDTH,
        height=HEIGHT,
        left=LEFT,
        right=right,
        top=TOP,
        bottom=bottom,
    )


def _labels(commits: list[str], xs: dict, tags: dict, holders: dict) -> list[XLabel]:
    """A label under each commit's point, GAP px apart at least: where not all fit, the
    tagged commits and the holders first, then the newest."""
    first = sorted(
        reversed(commits), key=lambda c: (not tags.get(c), c not in holders)
    )  # stable: newest first within each group
    taken: list[float] = []
    out = []
    for c in first:
        x = round(xs[c], 1)
        if all(abs(x - t) >= GAP for t in taken):
            taken.append(x)
            named = tags.get(c)
            out.append(XLabel(c, named[0] if named else c[:12], x, bool(named)))
    return sorted(out, key=lambda label: label.x)


def _range(numbers: list[float]) -> tuple[float, float]:
    """The y axis: the numbers' span with a margin (a span around one value when flat)."""
    if not numbers:
        return 0.0, 1.0
    low, high = min(numbers), max(numbers)
    pad = (high - low) * 0.08 or max(abs(high) * 0.1, 0.5)
    return low - pad, high + pad


def _ticks(low: float, high: float) -> list[float]:
    """About TICKS round values (steps of 1, 2 or 5 times a power of ten) within the axis."""
    rough = (high - low) / TICKS
    power = 10 ** math.floor(math.log10(rough))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= rough)
    first = math.ceil(low / step)
    return [k * step for k in range(first, math.floor(high / step) + 1)]
