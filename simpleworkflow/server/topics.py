"""``/subscriptions`` and ``/topics/{topic}/publish``: topics over HTTP (see docs/topics.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from starlette.responses import Response

from simpleworkflow.server import bodies
from simpleworkflow.server.schemas import (
    Publish,
    PublishedOut,
    Subscribe,
    SubscriptionOut,
    Unsubscribed,
)
from simpleworkflow.web import routing
from simpleworkflow.web.auth import Auth
from simpleworkflow.web.problems import responses
from simpleworkflow.web.source import ClientSource

Topic = Annotated[str, Path(description="a topic, e.g. orders.created", max_length=200)]


def router(source: ClientSource, auth: Auth, route_class: type[routing.GuardedRoute]) -> APIRouter:
    """Subscriptions through the ``admin`` facade; publishing through the client."""
    api = APIRouter(tags=["topics"], route_class=route_class)
    write_errors = responses(400, 401, 403, 413, 422, 503)

    @api.get(
        "/subscriptions",
        response_model=list[SubscriptionOut],
        dependencies=[auth.reader()],
        responses=responses(401, 422, 503),
    )
    async def list_subscriptions(
        topic: Annotated[
            str | None, Query(description="only those matching this topic", max_length=200)
        ] = None,
        type: Annotated[
            str | None, Query(description="only those of this workflow type", max_length=200)
        ] = None,
    ) -> Response:
        """Every subscription, or those a topic matches, or those of one type."""
        found = await source.client.admin.subscriptions(topic=topic, type=type)
        return bodies.respond([one.to_dict() for one in found])

    @api.put(
        "/subscriptions",
        response_model=SubscriptionOut,
        dependencies=[auth.writer()],
        responses=write_errors,
    )
    async def subscribe(request: Subscribe) -> Response:
        """Subscribe a type to a pattern; subscribing again updates its start options."""
        admin = source.client.admin
        made = await admin.subscribe(
            request.pattern,
            request.type,
            priority=request.priority,
            max_attempts=request.max_attempts,
        )
        return bodies.respond(made.to_dict())

    @api.delete(
        "/subscriptions",
        response_model=Unsubscribed,
        dependencies=[auth.writer()],
        responses=write_errors,
    )
    async def unsubscribe(
        pattern: Annotated[str, Query(description="the subscription's pattern", max_length=200)],
        type: Annotated[str, Query(description="the subscribed workflow type", max_length=200)],
    ) -> Response:
        """Remove a subscription; runs it started are left as they are."""
        removed = await source.client.admin.unsubscribe(pattern, type)
        return bodies.respond({"removed": removed})

    @api.post(
        "/topics/{topic}/publish",
        response_model=PublishedOut,
        dependencies=[auth.writer()],
        responses=write_errors,
    )
    async def publish(topic: Topic, request: Publish) -> Response:
        """Start one run per workflow type subscribed to a pattern the topic matches, in
        one transaction; the same ``event_id`` again starts nothing and returns the runs
        the first publish started. No subscription: no runs, nothing written."""
        published = await source.client.publish(topic, request.payload, event_id=request.event_id)
        out = published.to_dict()
        out["runs"] = [bodies.run(run) for run in published.runs]
        return bodies.respond(out)

    return api
