"""``/healthz`` and ``/readyz``: for load balancers and orchestrators, never behind a token.

``/healthz`` says the process serves; ``/readyz`` that it can do its work: the database
answers and its schema is the one this code needs (503 otherwise, with the reason).

The reason names the database (user, host, name) and the driver's words: only a caller
that shows a token sees it (so, with no tokens set, nobody), here alone; other endpoints'
503s never say it (``problems.detail``). Anyone else gets the kind of failure alone, and
the server logs the reason.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request

from simpleworkflow import errors
from simpleworkflow.server.schemas import Health, Ready
from simpleworkflow.web import problems, routing
from simpleworkflow.web.auth import Auth
from simpleworkflow.web.problems import responses
from simpleworkflow.web.source import ClientSource

_log = logging.getLogger("simpleworkflow.server")
#: What an unidentified caller is told, by the kind of failure.
_PLAIN = {
    errors.SchemaError: "the database's schema is missing or older than this server needs: "
    "run `simpleworkflow migrate`; the server's log names the database",
    errors.StoreUnavailable: problems.STORE_UNAVAILABLE,
}


def router(
    source: ClientSource, route_class: type[routing.GuardedRoute], auth: Auth | None = None
) -> APIRouter:
    api = APIRouter(tags=["health"], route_class=route_class)

    @api.get("/healthz")
    async def healthz() -> Health:
        """The process is up and serving (the database is not asked)."""
        return Health()

    @api.get("/readyz", response_model=Ready, responses=responses(503))
    async def readyz(request: Request) -> Any:
        """The database is reachable and its schema current; 503 says which is not."""
        try:
            return Ready(schema_version=await source.client.admin.schema_version())
        except (errors.SchemaError, errors.StoreUnavailable) as exc:
            if (auth or Auth()).identifies(request.headers.get("authorization")):
                said = str(exc)  # an operator's probe: the reason in full
            else:
                _log.warning("not ready: %s", exc)
                said = next(text for cls, text in _PLAIN.items() if isinstance(exc, cls))
            return problems.problem_response(503, _name(exc), said, headers={"Retry-After": "5"})

    return api


def _name(exc: errors.SimpleWorkflowError) -> str:
    """The problem's name, the same a caller with a token sees."""
    return next(name for cls, _, name in problems.STATUSES if isinstance(exc, cls))
