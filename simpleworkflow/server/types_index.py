"""``/types``: every workflow type at a glance, pausing or resuming one, and its
concurrency limits."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from starlette.responses import Response

from simpleworkflow.server import bodies
from simpleworkflow.server.schemas import ConcurrencyIn, RegistryOut, TypeOut
from simpleworkflow.web import routing
from simpleworkflow.web.auth import Auth
from simpleworkflow.web.problems import responses
from simpleworkflow.web.source import ClientSource

TypeName = Annotated[
    str, Path(description="a workflow type, e.g. billing.invoice.v1", max_length=300)
]


def router(source: ClientSource, auth: Auth, route_class: type[routing.GuardedRoute]) -> APIRouter:
    """The ``/types`` endpoints, through the ``admin`` facade of ``source``'s client."""
    api = APIRouter(prefix="/types", tags=["types"], route_class=route_class)

    @api.get(
        "",
        response_model=list[TypeOut],
        dependencies=[auth.reader()],
        responses=responses(401, 503),
    )
    async def list_types() -> Response:
        """Every type with runs or a registry entry: runs by state, how late its queue
        is (the oldest due run's age), and its registry entry (runtime, paused)."""
        stats = await source.client.admin.stats()
        return bodies.respond([bodies.type_stats(one) for one in stats])

    switch_errors = responses(401, 403, 404, 422, 503)

    @api.post(
        "/{type}/pause",
        response_model=RegistryOut,
        dependencies=[auth.writer()],
        responses=switch_errors,
    )
    async def pause_type(type: TypeName) -> Response:
        """Stop every worker from claiming the type; its runs wait as pending. 404 for a
        type the registry does not hold."""
        return bodies.respond(bodies.registry(await source.client.admin.pause(type)))

    @api.post(
        "/{type}/resume",
        response_model=RegistryOut,
        dependencies=[auth.writer()],
        responses=switch_errors,
    )
    async def resume_type(type: TypeName) -> Response:
        """Let the workers of its runtime claim the type again."""
        return bodies.respond(bodies.registry(await source.client.admin.resume(type)))

    @api.put(
        "/{type}/concurrency",
        response_model=RegistryOut,
        dependencies=[auth.writer()],
        responses=switch_errors,
    )
    async def set_concurrency(type: TypeName, limits: ConcurrencyIn) -> Response:
        """Set how many runs of the type may be leased at once, in all and per
        concurrency key (both together; null: no limit). 404 for a type the registry
        does not hold."""
        entry = await source.client.admin.set_concurrency(
            type, limits.concurrency, per_key=limits.key_concurrency
        )
        return bodies.respond(bodies.registry(entry))

    return api
