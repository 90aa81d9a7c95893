"""``/healthz`` and ``/readyz``: for load balancers and orchestrators, never behind a token.

``/healthz`` says the process serves; ``/readyz`` that it can do its work: the database
answers and its schema is the one this code needs (503 otherwise, with the reason).
"""

from __future__ import annotations

from fastapi import APIRouter

from simpleworkflow.server import routing
from simpleworkflow.server.problems import responses
from simpleworkflow.server.schemas import Health, Ready
from simpleworkflow.server.source import ClientSource


def router(source: ClientSource, route_class: type[routing.GuardedRoute]) -> APIRouter:
    api = APIRouter(tags=["health"], route_class=route_class)

    @api.get("/healthz")
    async def healthz() -> Health:
        """The process is up and serving (the database is not asked)."""
        return Health()

    @api.get("/readyz", responses=responses(503))
    async def readyz() -> Ready:
        """The database is reachable and its schema current; 503 says which is not."""
        return Ready(schema_version=await source.client.admin.schema_version())

    return api
