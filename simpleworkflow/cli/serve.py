"""``simpleworkflow serve``: the HTTP API (``simpleworkflow.server``) under uvicorn.

The server extra is imported only when the command runs, so the rest of the command line
works without it. Before it listens, the command checks the schema (a missing one is a
mistake to report now, not at the first request) and the tokens: on an address other
than the loopback interface it refuses to serve without a token unless ``--insecure``.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import socket
import sys
from typing import Any

from simpleworkflow import errors
from simpleworkflow.cli import _common

_log = logging.getLogger("simpleworkflow.server")

DEFAULT_PORT = 8000
FORWARDED_ENV = "SIMPLEWORKFLOW_FORWARDED_ALLOW_IPS"
_TOKEN_HELP = (
    "bearer token that may do everything (default: $SIMPLEWORKFLOW_API_TOKEN); prefer the "
    "environment, which other users of the machine cannot read in the process list"
)


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "serve",
        help="serve the HTTP API (needs the server extra)",
        description="Serve the REST API on HOST:PORT: endpoints under /api/v1, the OpenAPI "
        "document at /openapi.json, interactive docs at /docs, /healthz and /readyz. "
        "Without a token it serves only on the loopback interface (see --insecure).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"0 picks a free one ({DEFAULT_PORT})"
    )
    parser.add_argument("--token", help=_TOKEN_HELP)
    parser.add_argument(
        "--read-token",
        help="bearer token that may only read (default: $SIMPLEWORKFLOW_API_READ_TOKEN)",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="serve on a non-loopback address without a token: anyone who reaches it may "
        "start, cancel and delete runs",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=None,
        metavar="N",
        help="largest request body accepted (16 MiB); each payload is limited besides",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name the server answers to besides the address it listens on and the "
        "loopback names (repeat it; '.example.com' for subdomains too; '*' for any); "
        "default $SIMPLEWORKFLOW_ALLOWED_HOSTS, comma-separated",
    )
    parser.add_argument(
        "--forwarded-allow-ips",
        default=None,
        metavar="IPS",
        help="addresses of the proxies whose X-Forwarded-For and -Proto headers are "
        "trusted, comma-separated ('*' for any); default $SIMPLEWORKFLOW_FORWARDED_ALLOW_IPS, "
        "else none",
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
    parser.add_argument(
        "--no-access-log", action="store_true", help="do not log each request (faster)"
    )
    _common.add_store_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from simpleworkflow import server
        from simpleworkflow.server import one_write
    except ImportError as exc:
        raise errors.ConfigurationError(
            f"`simpleworkflow serve` needs the server extra ({exc.name} is missing): "
            "pip install 'simpleworkflow[server]'"
        ) from None
    auth = server.Auth.from_env(args.token, args.read_token)
    if not server.is_loopback(args.host) and not auth.enabled and not args.insecure:
        raise errors.ConfigurationError(
            f"refusing to serve on {args.host} without a token: anyone who can reach it "
            "could start, cancel and delete runs. Set $SIMPLEWORKFLOW_API_TOKEN (and "
            "$SIMPLEWORKFLOW_API_READ_TOKEN for read-only use), or pass --insecure if "
            "something in front of the server authenticates"
        )
    hosts = server.AllowedHosts.for_bind(args.host, args.allowed_host)
    _check_schema(args)
    sock = _bind(args.host, args.port)
    metrics = _metrics(args)
    app = server.create_app(
        database_url=args.database_url,
        schema=args.schema,
        auth=auth,
        max_body_bytes=args.max_body_bytes or server.DEFAULT_MAX_BODY_BYTES,
        metrics=None if metrics is None else metrics.asgi_app(),
        observers=[] if metrics is None else [metrics.observer],
        allowed_hosts=hosts,
        telemetry=None if opentelemetry_records() else NO_TELEMETRY,
    )
    proxies = _forwarded_allow_ips(args.forwarded_allow_ips)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    pages = ", dashboard at /" if server.has_dashboard() else ""
    print(
        f"serving the API on http://{shown}:{port}{server.API_PREFIX} (docs at /docs{pages}); "
        f"auth {'on' if auth.enabled else 'off'}",
        flush=True,
    )
    config = uvicorn.Config(
        app,
        log_level=args.log_level,
        access_log=not args.no_access_log,
        http=one_write.OneWriteProtocol,
        lifespan="on",
        proxy_headers=proxies is not None,
        forwarded_allow_ips=proxies,
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0


#: FastAPI's own OpenTelemetry (0.165 and later) switched off: FastAPI otherwise asks
#: OpenTelemetry for its three global providers on every request, about 11 µs of a start's
#: CPU (docs/performance.md, "The API's start, eighth pass"), to find them unset.
NO_TELEMETRY = {"tracing": False, "metrics": False, "logs": False}

#: The modules of the OpenTelemetry API's own providers (the proxies that stand in until
#: an SDK's are set, and the no-ops): they record nothing.
_API_PROVIDERS = frozenset(
    {
        "opentelemetry.trace",
        "opentelemetry.metrics",
        "opentelemetry.metrics._internal",
        "opentelemetry._logs",
        "opentelemetry._logs._internal",
    }
)


def opentelemetry_records() -> bool:
    """Whether OpenTelemetry may record the server's requests: a FastAPI with telemetry of
    its own, and as ``serve`` starts either a global provider that is not the API's own
    (``opentelemetry-instrument``, ``OTEL_PYTHON_TRACER_PROVIDER``, any SDK's) or
    ``FASTAPI_OTEL_AUTO_CONFIGURE=true`` (FastAPI then sets them up as the app starts).
    ``serve`` runs no code of the user's that could set one later."""
    if importlib.util.find_spec("fastapi.telemetry") is None:
        return False  # an older FastAPI, without telemetry of its own
    if os.environ.get("FASTAPI_OTEL_AUTO_CONFIGURE", "").strip().lower() == "true":
        return True
    from opentelemetry import _logs, metrics, trace  # FastAPI's telemetry needs the API

    found = (trace.get_tracer_provider(), metrics.get_meter_provider(), _logs.get_logger_provider())
    return any(type(provider).__module__ not in _API_PROVIDERS for provider in found)


def _forwarded_allow_ips(given: str | None) -> str | None:
    """The proxies whose forwarded headers uvicorn may trust, or ``None``: trust none
    (uvicorn's own default trusts any loopback client, which lets any local process, or a
    proxy that passes the headers through, say it is another client, or https)."""
    text = (given if given is not None else os.environ.get(FORWARDED_ENV, "")).strip()
    return text or None


def _metrics(args: argparse.Namespace) -> Any:
    """The Prometheus metrics served at ``/metrics`` (the gauges read from the database at
    each scrape, and what the API starts and signals counted), when the metrics extra is
    installed; without it the server serves none, and says so once."""
    try:
        from simpleworkflow.metrics import Metrics
    except errors.ConfigurationError:
        _log.info("no /metrics: pip install 'simpleworkflow[metrics]' to serve them")
        return None
    return Metrics(args.database_url, schema=args.schema)


def _check_schema(args: argparse.Namespace) -> None:
    """Fail now on a missing or old schema; a database that is down only gets a warning,
    since it may come back (``/readyz`` says 503 meanwhile)."""
    try:
        with _common.admin_for(args, create=True) as admin:
            admin.schema_version()
    except errors.StoreUnavailable as exc:
        print(f"simpleworkflow: warning: {exc}; serving anyway", file=sys.stderr, flush=True)


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one), for uvicorn to serve on."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        raise errors.ConfigurationError(f"cannot listen on {host}:{port}: {exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock
