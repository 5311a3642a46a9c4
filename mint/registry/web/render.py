"""Templates: Jinja2 with autoescaping on for every template, loaded from the package."""

from __future__ import annotations

import functools
from pathlib import Path
from urllib.parse import quote

import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse

from mint import __version__
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
    return env


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def render(
    request: Request, template: str, who: Identity | None, status: int = 200, **context
) -> HTMLResponse:
    """TEMPLATE filled with CONTEXT, plus who is signed in, whether they may act, and the
    session's CSRF token for the forms."""
    may_act = who is not None and who.role.allows(Access.MAINTAINER)
    html = (
        environment()
        .get_template(template)
        .render(who=who, may_act=may_act, csrf=csrf_token(request), version=__version__, **context)
    )
    return HTMLResponse(html, status_code=status, headers=HEADERS)
