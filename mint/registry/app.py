"""The registry's HTTP application: FastAPI over one repository, with no state of its own.

Every request reads and writes the repository's database and store, so any number of
processes over the same PostgreSQL database and store are replicas; compare-and-swap in the
database keeps them consistent.
"""

from __future__ import annotations

import threading

from fastapi import FastAPI

from mint import __version__
from mint.fleet.signals import DIVERGED_AFTER
from mint.registry import (
    auth,
    failures,
    fleet_watch,
    routes_blobs,
    routes_canary,
    routes_events,
    routes_fleet,
    routes_hf,
    routes_keys,
    routes_proposals,
    routes_read,
    routes_search,
    routes_team,
    routes_traces,
    routes_transfer,
    routes_write,
    web,
    webhooks,
)
from mint.registry.limits import BodyLimit, Limits
from mint.repo import Repo

# The API's routers, each a module of routes under /api/v1/.
ROUTERS = (
    routes_read,
    routes_search,
    routes_write,
    routes_canary,
    routes_traces,
    routes_blobs,
    routes_transfer,
    routes_events,
    routes_team,
    routes_keys,
    routes_fleet,
    routes_proposals,
)


def create_app(
    repo: Repo,
    limits: Limits | None = None,
    hf_main: str | None = None,
    public_read=False,
    presign_threshold: int | None = routes_blobs.PRESIGN_THRESHOLD,
    diverged_after: float = DIVERGED_AFTER,
) -> FastAPI:
    """The application serving REPO under /api/v1/, described at /openapi.json, and the Hub's
    download protocol (`routes_hf`): `main` is HF_MAIN's holder when given, else the head;
    PUBLIC_READ opens the Hub's reads to requests without a token. Downloads of blobs of
    PRESIGN_THRESHOLD bytes or more redirect to the store's presigned URLs (S3; None: never).
    A channel whose live instances stay off its holder for DIVERGED_AFTER seconds has
    diverged (a `fleet.diverged` event; marked on its page)."""
    app = FastAPI(
        title="mint registry",
        version=__version__,
        description="Version control, a registry and a runtime for LoRA adapters: the "
        "registry's API (docs/registry-api.md).",
        docs_url=None,
        redoc_url=None,
    )
    app.state.repo = repo
    app.state.limits = limits or Limits()
    app.state.presign_threshold = presign_threshold
    app.state.diverged_after = diverged_after
    # Set when the server is told to stop: event streams, which never end by themselves,
    # end then, so that the server stops once the requests in flight are answered.
    app.state.stopping = threading.Event()
    for module in ROUTERS:
        app.include_router(module.router)
    app.include_router(routes_fleet.root)
    app.add_api_route("/healthz", healthz, methods=["GET"], tags=["service"])
    failures.install(app)
    webhooks.install(app)  # delivers while the app runs (its lifespan)
    fleet_watch.install(app)  # fleet.diverged and fleet.converged events, while it runs
    auth.install(app)  # watches for token revocations while the app runs
    routes_hf.install(app, hf_main, public_read)
    web.install(app)  # the pages at / (docs/web.md), outside /openapi.json
    app.add_middleware(BodyLimit, limits=app.state.limits)
    return app


def healthz() -> dict[str, str]:
    """Alive (no token needed; touches neither the database nor the store)."""
    return {"status": "ok"}


def serve(repo: Repo, host: str, port: int, limits: Limits | None = None, **hub) -> None:
    """Run the application with uvicorn until interrupted (SIGINT or SIGTERM), with LIMITS'
    deadline on slow clients and cap on open connections (`serving`)."""
    from mint.registry import serving

    limits = limits or Limits()
    app = create_app(repo, limits, **hub)
    serving.run(app, host, port, limits, stopping=app.state.stopping)
