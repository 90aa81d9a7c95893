"""Workflows inside a FastAPI service: a client for the endpoints, a worker beside them.

Needs the ``server`` extra. :class:`Workflows` gives an application of yours three things:

- ``lifespan``: the ``AsyncClient`` is closed when the application shuts down, after the
  in-process worker (``worker=True``, for a small deployment: one process serves and
  works) has finished or given back what it was running;
- ``client``: a dependency that hands the client to an endpoint
  (``client: AsyncClient = Depends(workflows.client)``), to start runs, in a transaction
  of the endpoint's own with ``connection=`` (docs/transactions.md);
- ``include``: the HTTP API and the dashboard under a prefix of yours, behind your own
  auth dependencies (``dependencies=[Depends(staff_only)]``) besides or instead of the
  API's tokens.

:func:`stream_events` answers a run's stream as Server-Sent Events from an endpoint of
yours, as the API's ``/runs/{id}/streams/{key}`` does. See docs/frameworks.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from fastapi import APIRouter, FastAPI
from starlette.responses import StreamingResponse

from simpleworkflow import errors, names, server
from simpleworkflow.app import App
from simpleworkflow.client import AsyncClient
from simpleworkflow.web import sse
from simpleworkflow.web.auth import Auth
from simpleworkflow.worker import IntentPoller

__all__ = ["Workflows", "stream_events"]

_log = logging.getLogger(__name__)


class Workflows:
    """The workflows of one FastAPI application: ``app``'s client and, with ``worker``,
    its in-process worker. ``database_url`` and ``schema`` default to ``app``'s (then
    the environment's); ``worker_options`` are :class:`~simpleworkflow.worker.IntentPoller`'s
    keywords (``concurrency``, ``type_prefixes``...); ``migrate`` brings the schema up to
    date at startup (a call with ``connection=`` never migrates)."""

    def __init__(
        self,
        app: App,
        *,
        database_url: str | None = None,
        schema: str | None = None,
        worker: bool = False,
        worker_options: Mapping[str, Any] | None = None,
        migrate: bool = False,
    ) -> None:
        self.app = app
        self.database_url = database_url or app.database_url
        self.schema = schema or app.schema
        self.worker = worker
        self.worker_options = dict(worker_options or {})
        self.migrate = migrate
        # Connects to nothing yet: its pools open on first use, in the serving loop.
        self._client = AsyncClient(self.database_url, schema=self.schema, observers=[app.observers])
        self._serving = False

    def client(self) -> AsyncClient:
        """The dependency of an endpoint that needs the client; inside the lifespan only."""
        if not self._serving:
            raise errors.ConfigurationError(
                "the workflows' client is used outside the application's lifespan: give "
                "FastAPI(lifespan=workflows.lifespan), or enter it from yours"
            )
        return self._client

    @contextlib.asynccontextmanager
    async def lifespan(self, application: Any = None) -> AsyncIterator[None]:
        """Open the client (and start the worker) for as long as the application serves."""
        if self.migrate:
            await self._client.migrate()
        poller = self._poller() if self.worker else None
        working = asyncio.create_task(poller.run_async()) if poller else None
        await asyncio.sleep(0)  # the worker's loop is known from here: stop() reaches it
        if working is not None and working.done():
            await self._client.aclose()
            working.result()  # it could not start (no handler, say): say why, at startup
        self._serving = True
        try:
            yield
        finally:
            self._serving = False
            try:
                if poller is not None and working is not None:
                    poller.stop()
                    await working  # raises what ended the worker early, if anything did
            finally:
                await self._client.aclose()

    def include(
        self,
        application: FastAPI | APIRouter,
        *,
        prefix: str = "/workflows",
        dependencies: Sequence[Any] = (),
        auth: Auth | None = None,
        dashboard: bool = True,
    ) -> None:
        """Serve the HTTP API at ``{prefix}/api/v1`` and the dashboard at ``{prefix}/``,
        each behind ``dependencies`` (``Depends(...)`` of yours, run before every
        endpoint and page; one that raises ``HTTPException`` refuses the request) and
        ``auth``, the API's tokens (none by default: your dependencies decide)."""
        if not prefix.startswith("/") or prefix.endswith("/"):
            raise errors.InvalidArgument(
                f"prefix must start with '/' and not end with one, not {prefix!r}"
            )
        api = server.router(
            self._client, auth=auth, prefix=f"{prefix}{server.API_PREFIX}", health_checks=False
        )
        application.include_router(api, dependencies=list(dependencies))
        if dashboard and server.has_dashboard():
            from simpleworkflow import dashboard as pages  # the server extra is installed

            application.include_router(
                pages.router(self._client, auth=auth),
                prefix=prefix,
                dependencies=list(dependencies),
            )

    def _poller(self) -> IntentPoller:
        options = {"database_url": self.database_url, "schema": self.schema}
        return self.app.poller(**{**options, **self.worker_options})


def stream_events(
    client: AsyncClient, run_id: str, key: str, *, after: int | None = None
) -> StreamingResponse:
    """The run's stream ``key`` as Server-Sent Events, live until it ends: one event per
    item (``id:`` its offset, ``data:`` its JSON), then an ``end`` event; the items after
    offset ``after`` (a reconnecting browser's ``Last-Event-ID``) when given."""
    return sse.response(client.read_stream(run_id, key, after=names.check_stream_offset(after)))
