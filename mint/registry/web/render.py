"""Templates: Jinja2 with autoescaping on for every template, loaded from the package."""

from __future__ import annotations

import datetime as dt
import functools
from pathlib import Path
from urllib.parse import quote

import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse

from mint import __version__
from mint.errors import RevisionNotFound
from mint.gates.checks import number_text
from mint.gates.evaluations import finite_metric
from mint.ids import utcnow
from mint.registry.web.session import csrf_token
from mint.team.tokens import Access, Identity

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
# Pages are per identity and change with every move: never cached, never framed.
HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Content-Security-Policy": "default-src 'self'; style-src 'self'; img-src 'self' data:; "
    "script-src 'none'; form-action 'self'; frame-ancestors 'none'",
}


@functools.cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["q"] = lambda s: quote(str(s), safe="")
    env.filters["path"] = lambda s: quote(str(s), safe="/@")
    env.filters["short"] = lambda s: (s or "")[:12]
    env.filters["first_line"] = lambda s: (s or "").splitlines()[0] if s else ""
    env.filters["size"] = _size
    env.filters["delta"] = lambda d: "-" if d is None else f"{d:.4g}"
    env.filters["metric"] = metric
    env.filters["ago"] = ago
    env.filters["words"] = in_words
    env.filters["utc"] = utc
    return env


def metric(value: object) -> str:
    """A metric's value rounded as the gate's table rounds it, wherever a page shows one (a
    stored value that is no number, as it is)."""
    number = finite_metric(value)
    return str(value) if number is None else number_text(number)


def _moment(at: str) -> dt.datetime:
    moment = dt.datetime.fromisoformat(at)
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def utc(at: str | None) -> str:
    """AT (an ISO time) as a person reads it exactly: `2026-12-03 21:43:45 UTC`."""
    if not at:
        return ""
    return _moment(at).astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# (seconds in the unit, its name, below how many seconds the unit is used)
_UNITS = (
    (1, "second", 60),
    (60, "minute", 3600),
    (3600, "hour", 36 * 3600),
    (86400, "day", 60 * 86400),
    (30 * 86400, "month", 730 * 86400),
    (365 * 86400, "year", None),
)


def ago(at: str | None, now: dt.datetime | None = None) -> str:
    """AT (an ISO time) relative to NOW (the page's time): `3 minutes ago`, `in 2 hours`."""
    if not at:
        return ""
    seconds = ((now or utcnow()) - _moment(at)).total_seconds()
    if abs(seconds) < 10:
        return "just now"
    for size, unit, below in _UNITS:
        if below is None or abs(seconds) < below:
            n = int(abs(seconds) // size)
            words = f"{n} {unit}{'' if n == 1 else 's'}"
            return f"{words} ago" if seconds > 0 else f"in {words}"
    return at


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def in_words(exc: Exception) -> str:
    """An error as the one line an error page shows: what is missing, in words, with the
    nearest known names (never the error's class)."""
    if not isinstance(exc, RevisionNotFound):
        return str(exc)
    near = f"; did you mean {', '.join(exc.near[:3])}?" if exc.near else ""
    return _missing(str(exc.rev), exc.why) + near


def _missing(rev: str, why: str) -> str:
    line, _, name = rev.partition("@")
    if why in ("no such line", "unknown line"):
        return f"no line named {rev!r}"
    if why.startswith("not a commit of line "):
        return f"no commit {rev} in line {why.removeprefix('not a commit of line ')}"
    if why in ("unknown revision", "no such commit"):
        return f"no commit, line, tag or channel named {rev!r}"
    if why == "unknown channel":
        return f"no channel named {name!r} on line {line}"
    if why == "no such tag":
        return f"no tag named {name!r} on line {line}"
    if why == "line has no commits":
        return f"line {rev} has no commits yet"
    if why.startswith("expected "):
        return f"{rev!r} is not a {why.removeprefix('expected ')}"
    return f"{why}: {rev}"


def render(
    request: Request, template: str, who: Identity | None, status: int = 200, **context
) -> HTMLResponse:
    """TEMPLATE filled with CONTEXT, plus who is signed in, whether they may act, and the
    session's CSRF token for the forms."""
    may_act = who is not None and who.role.allows(Access.MAINTAINER)
    html = (
        environment()
        .get_template(template)
        .render(
            who=who,
            may_act=may_act,
            csrf=csrf_token(request),
            version=__version__,
            status=status,
            **context,
        )
    )
    return HTMLResponse(html, status_code=status, headers=HEADERS)
