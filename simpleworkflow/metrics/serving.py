"""One process's metrics in one registry, and the two ways to serve them at ``/metrics``.

:class:`Metrics` holds a registry with the observer's counters and histograms, the gauges
read from the database at scrape time, and the process's own (CPU, memory, garbage
collector). A worker serves it on a port of its own (:meth:`Metrics.serve`, a thread);
a web application mounts :meth:`Metrics.asgi_app`.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from simpleworkflow import errors
from simpleworkflow.admin import Admin
from simpleworkflow.metrics.gauges import StoreGauges
from simpleworkflow.metrics.observer import MAX_NAMES, MetricsObserver

#: How the gauges' Postgres connection appears in ``pg_stat_activity``.
METRICS_NAME = "simpleworkflow metrics"

_log = logging.getLogger("simpleworkflow.metrics")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class Metrics:
    """The metrics of this process: register :attr:`observer`, then serve :attr:`registry`.

    ``database_url`` and ``schema`` (defaults as everywhere) are where the gauges are read
    at each scrape; ``gauges=False`` leaves them out (a producer that only counts what
    it starts). ``registry`` defaults to a new one with the process's own metrics; pass
    ``prometheus_client.REGISTRY`` to serve these beside your application's.
    """

    def __init__(
        self,
        database_url: str | None = None,
        *,
        schema: str | None = None,
        gauges: bool = True,
        registry: CollectorRegistry | None = None,
        max_names: int = MAX_NAMES,
    ) -> None:
        if registry is None:
            registry = CollectorRegistry()
            prometheus_client.ProcessCollector(registry=registry)
            prometheus_client.PlatformCollector(registry=registry)
            prometheus_client.GCCollector(registry=registry)
        self.registry = registry
        self.observer = MetricsObserver(registry, max_names=max_names)
        self._admin: Admin | None = None
        if gauges:
            self._admin = Admin(
                database_url, schema=schema, auto_migrate=False, application_name=METRICS_NAME
            )
            registry.register(StoreGauges(self._admin))

    def text(self) -> bytes:
        """Every metric in Prometheus's text format, as a scrape sees it."""
        return prometheus_client.generate_latest(self.registry)

    def serve(self, port: int, address: str = "0.0.0.0") -> MetricsServer:
        """Serve ``/metrics`` on ``address:port`` from a thread of this process (``port``
        0: any free port, see :attr:`MetricsServer.port`)."""
        try:
            server, thread = prometheus_client.start_http_server(
                port, addr=address, registry=self.registry
            )
        except OSError as exc:
            raise errors.ConfigurationError(
                f"cannot serve metrics on {address}:{port}: {exc.strerror or exc}; each "
                "process needs a port of its own (give every worker its own --metrics-port)"
            ) from None
        return MetricsServer(server, thread)

    def asgi_app(self) -> MetricsApp:
        """An ASGI application that answers every GET with the metrics; mount it at
        ``/metrics``. The gauges' query runs in a thread, off the event loop."""
        return MetricsApp(self.registry)

    def close(self) -> None:
        """Close the gauges' database connections."""
        if self._admin is not None:
            self._admin.backend.close()


class MetricsServer:
    """The HTTP server :meth:`Metrics.serve` started; :meth:`close` stops it."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        self.address: str = server.server_address[0]
        self.port: int = server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


class MetricsApp:
    """``/metrics`` as an ASGI application (an instance, not a function, so that
    Starlette's ``Route("/metrics", app)`` treats it as one)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope.get("method", "GET") not in ("GET", "HEAD"):
            allow = [(b"allow", b"GET, HEAD")]
            await _respond(send, 405, b"text/plain; charset=utf-8", b"use GET\n", allow)
            return
        headers = {name.lower(): value for name, value in scope.get("headers", [])}
        encoder, content_type = choose_encoder(headers.get(b"accept", b"").decode("latin-1"))
        body = await asyncio.to_thread(encoder, self._registry)
        extra: list[tuple[bytes, bytes]] = []
        if b"gzip" in headers.get(b"accept-encoding", b""):
            body = gzip.compress(body)
            extra.append((b"content-encoding", b"gzip"))
        if scope.get("method") == "HEAD":
            body = b""
        await _respond(send, 200, content_type.encode(), body, extra)


async def _respond(
    send: Send, status: int, content_type: bytes, body: bytes, extra: list[tuple[bytes, bytes]]
) -> None:
    headers = [(b"content-type", content_type), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    """Served alone (``uvicorn simpleworkflow...``), the app has nothing to start or stop."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
