"""The HTTP API: a FastAPI router over ``AsyncClient`` and its ``admin`` facade; and
:func:`create_app`, the one place where the API, the web dashboard and ``/metrics`` are
served together, behind the guard.

Needs the ``server`` extra (``pip install 'simpleworkflow[server]'``); in the package only
the CLI imports this one (the dashboard and the API share :mod:`simpleworkflow.web`).
Three ways to use it:

- ``simpleworkflow serve`` runs :func:`create_app` under uvicorn;
- ``app.include_router(simpleworkflow.server.router(client))`` adds the endpoints to an
  application of your own (under ``/api/v1``, with ``/healthz`` and ``/readyz``);
- ``app.mount("/workflows", simpleworkflow.server.create_app())`` mounts the whole app,
  its OpenAPI document and interactive docs included.

Endpoints act through the client only, so the API refuses and accepts exactly what
``Client`` does; see docs/api.md.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

from fastapi import APIRouter, FastAPI
from starlette.routing import Route
from starlette.types import ASGIApp

import simpleworkflow
from simpleworkflow import observe
from simpleworkflow.client import AsyncClient
from simpleworkflow.server import (
    forks,
    health,
    insight,
    limits,
    runs,
    schedules,
    streams,
    swagger,
    topics,
    types_index,
    values,
)
from simpleworkflow.server.start_lane import StartLane
from simpleworkflow.web import guard, problems, routing
from simpleworkflow.web.auth import Auth, is_loopback
from simpleworkflow.web.origins import AllowedHosts
from simpleworkflow.web.routing import DEFAULT_MAX_BODY_BYTES
from simpleworkflow.web.source import ClientSource

#: Where the versioned endpoints live.
API_PREFIX = "/api/v1"

#: The API's sections under the prefix, each ``build(source, auth, route_class)``. A new
#: group of endpoints is a module with such a function, added here.
SECTIONS: tuple[Callable[..., APIRouter], ...] = (
    runs.router,
    forks.router,
    types_index.router,
    topics.router,
    limits.router,
    schedules.router,
    insight.router,
    values.router,
    streams.router,
)

__all__ = [
    "API_PREFIX",
    "DEFAULT_MAX_BODY_BYTES",
    "AllowedHosts",
    "Auth",
    "create_app",
    "has_dashboard",
    "is_loopback",
    "router",
]


def router(
    client: AsyncClient | None = None,
    *,
    database_url: str | None = None,
    schema: str | None = None,
    auth: Auth | None = None,
    prefix: str = API_PREFIX,
    health_checks: bool = True,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    observers: Iterable[observe.Observer] = (),
) -> APIRouter:
    """The API as a router to include in a FastAPI app.

    ``client`` is the ``AsyncClient`` every endpoint acts through (yours to close, used
    in the loop that serves); without one the router opens its own on first use, on
    ``database_url`` and ``schema`` (else the environment, as ``AsyncClient()`` does),
    and closes it when the app shuts down. ``auth`` holds the tokens (none: no
    authentication). ``health_checks`` adds ``/healthz`` and ``/readyz`` at the root.
    """
    source = ClientSource(client, database_url=database_url, schema=schema, observers=observers)
    return _router(source, auth or Auth(), prefix, health_checks, max_body_bytes)


def _router(
    source: ClientSource, auth: Auth, prefix: str, health_checks: bool, max_body_bytes: int
) -> APIRouter:
    """The API on ``source``, which the router closes when the app shuts down."""
    if not prefix.startswith("/") or prefix.endswith("/"):
        raise ValueError(f"prefix must start with '/' and not end with one, not {prefix!r}")
    route_class = routing.route_class(max_body_bytes, auth)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        yield
        await source.aclose()

    outer = APIRouter(lifespan=lifespan)
    api = APIRouter(prefix=prefix)
    for build in SECTIONS:
        api.include_router(build(source, auth, route_class))
    outer.include_router(api)
    if health_checks:
        outer.include_router(health.router(source, route_class, auth))
    return outer


def has_dashboard() -> bool:
    """Whether the web dashboard's libraries (Jinja2, python-multipart: the server extra)
    are installed, so that :func:`create_app` serves it."""
    return all(
        importlib.util.find_spec(name) is not None for name in ("jinja2", "python_multipart")
    )


def create_app(
    client: AsyncClient | None = None,
    *,
    database_url: str | None = None,
    schema: str | None = None,
    auth: Auth | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    metrics: ASGIApp | None = None,
    observers: Iterable[observe.Observer] = (),
    dashboard: bool = True,
    allowed_hosts: AllowedHosts | Iterable[str] | None = None,
    telemetry: Mapping[str, Any] | None = None,
) -> FastAPI:
    """A FastAPI application serving :func:`router`, its OpenAPI document at
    ``/openapi.json`` and interactive docs at ``/docs``; ``metrics``, an ASGI app (the
    Prometheus exposition), answers at ``/metrics`` itself (no redirect to
    ``/metrics/``, so that a plain ``curl`` gets the metrics); the web dashboard
    (:mod:`simpleworkflow.dashboard`) at ``/`` when ``dashboard`` and its extra is
    installed. What ``simpleworkflow serve`` runs.

    :mod:`~simpleworkflow.web.guard` stands in front of it all: it answers only the
    ``allowed_hosts`` (the loopback names, and those given; ``["*"]`` for any), refuses
    writes from other sites, limits every body and turns any error into a problem.
    Behind it, :mod:`~simpleworkflow.server.start_lane` answers ``POST /api/v1/runs``
    as its route does, by a shorter way. ``telemetry`` is FastAPI's own OpenTelemetry
    settings (``FastAPI(telemetry=...)``, FastAPI 0.165 and later), its defaults if not
    given."""
    hosts = (
        allowed_hosts
        if isinstance(allowed_hosts, AllowedHosts)
        else AllowedHosts.of(allowed_hosts or ())
    )
    # Passed only when given: FastAPI before 0.165 takes no telemetry.
    options: dict[str, Any] = {} if telemetry is None else {"telemetry": dict(telemetry)}
    app = FastAPI(
        title="simpleworkflow",
        version=simpleworkflow.__version__,
        summary="Start, inspect and steer durable workflow runs.",
        description="Every endpoint but /healthz and /readyz needs a bearer token when the "
        "server was given one. Errors are RFC 9457 problem details. See docs/api.md.",
        redoc_url=None,
        docs_url=None,
        **options,
    )
    problems.install(app)
    source = ClientSource(client, database_url=database_url, schema=schema, observers=observers)
    auth = auth or Auth()
    # Added first, so that it runs inside the guard (the last added runs first).
    app.add_middleware(StartLane, path=f"{API_PREFIX}/runs", source=source, auth=auth)
    app.add_middleware(
        guard.Guard, hosts=hosts, max_body_bytes=max_body_bytes, api_prefix=API_PREFIX
    )
    app.include_router(swagger.router(app.title))
    app.include_router(_router(source, auth, API_PREFIX, True, max_body_bytes))
    if metrics is not None:
        # A route, not a mount: a mount answers /metrics with a redirect to /metrics/.
        app.router.routes.append(Route("/metrics", metrics, include_in_schema=False))
    if dashboard and has_dashboard():
        from simpleworkflow import dashboard as pages  # the dashboard extra is installed

        app.include_router(pages.router(source=source, auth=auth))
    return app
