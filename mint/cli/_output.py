"""Rendering: human text or one JSON document. Only the CLI prints.

`--json` prints the API's result through `to_jsonable`: every dataclass field and public
property, under its own name (a trailing underscore dropped: `from_` is "from").
"""

from __future__ import annotations

import json
import re
import sys

import click

from mint.jsonable import to_jsonable as to_jsonable  # re-exported: one serializer

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def emit_json(obj) -> None:
    click.echo(json.dumps(to_jsonable(obj), indent=2, ensure_ascii=False))


def echo(text: str = "") -> None:
    click.echo(text)


def warn(text: str) -> None:
    click.echo(text, err=True)


def safe(value) -> str:
    """Text from the repository as one printable line: control characters (terminal
    escapes included) shown as \\xNN."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))


def table(rows: list[list], headers: list[str]) -> str:
    cells = [headers] + [[safe(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def is_tty() -> bool:
    return sys.stdout.isatty()


def short(cid: str | None) -> str:
    return cid[:12] if cid else "-"
