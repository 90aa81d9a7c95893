"""The web dashboard: see and act on runs without SQL, in a browser.

Needs the ``dashboard`` extra (``pip install 'simpleworkflow[dashboard]'``: the server
extra and Jinja2); ``simpleworkflow serve`` shows it at ``/`` when it is installed.
Server-rendered pages (Jinja2, every value escaped), htmx for refreshes and forms, uPlot
for the throughput chart: every file inside the package, no build step, nothing fetched
from elsewhere. Three ways to use it:

- ``simpleworkflow serve`` mounts it at ``/`` beside the API;
- ``app.mount("/workflows", simpleworkflow.dashboard.create_app())`` mounts it under a
  prefix in an application of your own (every link follows the mount);
- ``app.include_router(simpleworkflow.dashboard.router(client))`` adds its routes.

Every page reads, and every button acts, through ``AsyncClient`` and its ``admin``
facade; tokens are the API's (:class:`~simpleworkflow.web.auth.Auth`). See
docs/dashboard.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Any

from fastapi import APIRouter, FastAPI
from starlette.requests import Request
from starlette.responses import Response

from simpleworkflow.client import AsyncClient
from simpleworkflow.dashboard import actions, controls, pages
from simpleworkflow.dashboard.site import Options, Site, route_class, static_file
from simpleworkflow.web.auth import Auth
from simpleworkflow.web.guard import FORM_MAX_BODY_BYTES, Guard
from simpleworkflow.web.origins import AllowedHosts
from simpleworkflow.web.source import ClientSource

__all__ = ["Options", "create_app", "router"]

_MEDIA = {
    ".js": "text/javascript",
    ".css": "text/css",
    ".txt": "text/plain",
    ".svg": "image/svg+xml",
}
#: A static file is never a page: nothing in it may load or run anything (an SVG opened
#: on its own is a document that could hold a script).
_STATIC_CSP = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"


def router(
    client: AsyncClient | None = None,
    *,
    database_url: str | None = None,
    schema: str | None = None,
    auth: Auth | None = None,
    options: Options | None = None,
    source: ClientSource | None = None,
) -> APIRouter:
    """The dashboard as a router to include in a FastAPI app.

    ``client`` is the ``AsyncClient`` it acts through (yours to close); without one it
    opens its own on first use, on ``database_url`` and ``schema`` (else the
    environment), and closes it when the app shuts down. ``source``, a
    :class:`~simpleworkflow.web.source.ClientSource` shared with the API's router,
    stands for all three (its owner closes it). ``auth`` holds the API's tokens (none:
    no login, as on the loopback default); ``options`` default to the environment's
    (:meth:`Options.from_env`).
    """
    owned = source is None
    if source is None:
        source = ClientSource(client, database_url=database_url, schema=schema)
    elif client is not None or database_url is not None or schema is not None:
        raise TypeError("give a source, or a client or database_url and schema, not both")
    site = Site(source, auth or Auth(), options or Options.from_env())
    shared = source

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        yield
        if owned:
            await shared.aclose()

    routes = route_class(site)
    outer = APIRouter(lifespan=lifespan, include_in_schema=False)
    outer.include_router(pages.router(site, routes))
    outer.include_router(actions.router(site, routes))
    outer.include_router(controls.router(site, routes))

    @outer.get("/static/{name}", name="dashboard.static")
    async def static(request: Request, name: str) -> Response:
        """The vendored scripts, the style sheet and the icon (a fixed set of files)."""
        return _static(name)

    @outer.get("/favicon.ico", name="dashboard.favicon")
    async def favicon(request: Request) -> Response:
        """The icon, where a browser looks for it on a page that names none (the pages
        name theirs in their head): no 404 in the server's log."""
        return _static("favicon.svg")

    return outer


def _static(name: str) -> Response:
    body = static_file(name)
    suffix = name[name.rfind(".") :] if "." in name else ""
    if body is None or suffix not in _MEDIA:
        return Response("not found", status_code=404, media_type="text/plain")
    headers = {
        "Cache-Control": "public, max-age=3600",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": _STATIC_CSP,
    }
    return Response(body, media_type=_MEDIA[suffix], headers=headers)


def create_app(
    client: AsyncClient | None = None,
    *,
    database_url: str | None = None,
    schema: str | None = None,
    auth: Auth | None = None,
    options: Options | None = None,
    allowed_hosts: Iterable[str] = (),
) -> FastAPI:
    """A FastAPI application serving only the dashboard, to mount under a prefix:
    ``app.mount("/workflows", create_app(client))``. The guard of the API stands in front
    (:mod:`simpleworkflow.web.guard`): it answers the loopback names and
    ``allowed_hosts`` (``["*"]`` for any), limits bodies, and answers any error with its
    id."""
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    app.add_middleware(
        Guard, hosts=AllowedHosts.of(allowed_hosts), max_body_bytes=FORM_MAX_BODY_BYTES
    )
    app.include_router(
        router(client, database_url=database_url, schema=schema, auth=auth, options=options)
    )
    return app
