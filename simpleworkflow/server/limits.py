"""``/limits`` and ``/types/{type}/rate-limit``: rate limits over HTTP (see
docs/flow-control.md); a type's concurrency limits are under ``/types``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from starlette.responses import Response

from simpleworkflow.server import bodies
from simpleworkflow.server.schemas import (
    LimitDeleted,
    RateLimitIn,
    RateLimitOut,
    RegistryOut,
    TypeRateLimitIn,
)
from simpleworkflow.web import routing
from simpleworkflow.web.auth import Auth
from simpleworkflow.web.problems import responses
from simpleworkflow.web.source import ClientSource

LimitName = Annotated[str, Path(description="a rate limit, e.g. partner-api", max_length=100)]
TypeName = Annotated[str, Path(description="a workflow type", max_length=300)]


def router(source: ClientSource, auth: Auth, route_class: type[routing.GuardedRoute]) -> APIRouter:
    """Rate limits through the ``admin`` facade of ``source``'s client."""
    api = APIRouter(tags=["limits"], route_class=route_class)
    write_errors = responses(400, 401, 403, 413, 422, 503)

    @api.get(
        "/limits",
        response_model=list[RateLimitOut],
        dependencies=[auth.reader()],
        responses=responses(401, 503),
    )
    async def list_limits() -> Response:
        """Every rate limit, by name."""
        found = await source.client.admin.rate_limits()
        return bodies.respond([limit.to_dict() for limit in found])

    @api.put(
        "/limits/{name}",
        response_model=RateLimitOut,
        dependencies=[auth.writer()],
        responses=write_errors,
    )
    async def set_limit(name: LimitName, request: RateLimitIn) -> Response:
        """Create or change a rate limit: at most ``rate`` claims ('10/s', '600/m') of
        the types that obey it, per concurrency key if ``per_key``."""
        made = await source.client.admin.set_rate_limit(name, request.rate, per_key=request.per_key)
        return bodies.respond(made.to_dict())

    @api.delete(
        "/limits/{name}",
        response_model=LimitDeleted,
        dependencies=[auth.writer()],
        responses=write_errors,
    )
    async def delete_limit(name: LimitName) -> Response:
        """Delete a rate limit; the types that obeyed it run unthrottled."""
        return bodies.respond({"deleted": await source.client.admin.delete_rate_limit(name)})

    @api.put(
        "/types/{type}/rate-limit",
        response_model=RegistryOut,
        dependencies=[auth.writer()],
        responses=responses(400, 401, 403, 404, 413, 422, 503),
    )
    async def use_limit(type: TypeName, request: TypeRateLimitIn) -> Response:
        """Have every claim of the type take a token of a rate limit (null: none). 404
        for a type the registry does not hold."""
        entry = await source.client.admin.limit_rate(type, request.rate_limit)
        return bodies.respond(bodies.registry(entry))

    return api
