"""Rendering: human text or one JSON document. Only the CLI prints."""

from __future__ import annotations

import dataclasses
import json
import sys

import click


def to_jsonable(obj):
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    return obj


def emit_json(obj) -> None:
    click.echo(json.dumps(to_jsonable(obj), indent=2, sort_keys=False, ensure_ascii=False))


def echo(text: str = "") -> None:
    click.echo(text)


def warn(text: str) -> None:
    click.echo(text, err=True)


def table(rows: list[list[str]], headers: list[str]) -> str:
    cells = [headers] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def is_tty() -> bool:
    return sys.stdout.isatty()


def short(cid: str | None) -> str:
    return cid[:12] if cid else "-"
