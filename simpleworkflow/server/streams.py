"""``/runs/{id}/streams``: a run's streams, and one of them as Server-Sent Events
(``GET /runs/{id}/streams/{key}``, resumable by ``Last-Event-ID``; see ``web/sse.py``,
which the dashboard serves too)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Header, Path, Query
from pydantic import BaseModel, Field
from starlette.responses import Response, StreamingResponse

from simpleworkflow.server import bodies
from simpleworkflow.web import routing, sse
from simpleworkflow.web.auth import Auth
from simpleworkflow.web.problems import responses
from simpleworkflow.web.source import ClientSource

RunId = Annotated[str, Path(description="the run's id (a UUID)", max_length=100)]
Key = Annotated[str, Path(description="the stream's key", max_length=100)]


class StreamOut(BaseModel):
    """One of a run's streams."""

    key: str
    items: int = Field(description="how many items it holds")
    closed: bool = Field(description="closed by the run (a stream also ends with its run)")
    updated_at: datetime | None


def router(source: ClientSource, auth: Auth, route_class: type[routing.GuardedRoute]) -> APIRouter:
    """The streams' endpoints, on the client ``source`` gives."""
    api = APIRouter(prefix="/runs", tags=["streams"], route_class=route_class)
    reader = [auth.reader()]

    @api.get(
        "/{run_id}/streams",
        response_model=list[StreamOut],
        dependencies=reader,
        responses=responses(401, 404, 503),
    )
    async def run_streams(run_id: RunId) -> Response:
        """The run's streams: each key, its item count, whether it was closed."""
        found = await source.client.streams(run_id)
        return bodies.respond([s.to_dict() for s in found])

    @api.get(
        "/{run_id}/streams/{key}",
        dependencies=reader,
        response_class=StreamingResponse,
        responses={
            200: {"content": {"text/event-stream": {}}, "description": "the items, live"},
            **responses(401, 404, 422, 503),
        },
    )
    async def read_stream(
        run_id: RunId,
        key: Key,
        after: Annotated[
            int | None, Query(description="start after this offset (default: the first item)")
        ] = None,
        last_event_id: Annotated[str | None, Header(description="resume after this id")] = None,
    ) -> Response:
        """The stream's items as Server-Sent Events, live until the stream ends."""
        start = sse.resume(after, last_event_id)
        await source.client.get(run_id)  # 404 before the stream's headers are sent
        return sse.response(source.client.read_stream(run_id, key, after=start))

    return api
