"""The registry's web pages, served at `/` by `mint registry serve`: server-rendered HTML
(Jinja2, autoescaped) over the same `mint.api` calls as the JSON API, with no JavaScript.
See docs/web.md."""

from __future__ import annotations

from fastapi import FastAPI


def install(app: FastAPI) -> None:
    """Add the pages (kept out of `/openapi.json`) and the JSON routes they need beyond the
    API's own: `GET /api/v1/approvals`, `GET /api/v1/channel`, and `GET /api/v1/datasets/{id}`
    unless the application has it already."""
    from mint.registry.web import (
        actions,
        approvals,
        channel_api,
        datasets,
        evaluations,
        pages,
        tokens_page,
    )

    app.include_router(approvals.router)
    app.include_router(channel_api.router)
    if not any(getattr(r, "path", "") == "/api/v1/datasets/{dataset_id}" for r in app.routes):
        app.include_router(datasets.router)
    app.include_router(pages.router)
    app.include_router(actions.router)
    app.include_router(evaluations.router)
    app.include_router(tokens_page.router)
