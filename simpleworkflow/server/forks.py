"""``/runs/{run_id}/fork`` and ``/runs/{run_id}/forks``: forking a finished run from one
of its steps over HTTP, through ``admin.fork`` (see docs/admin.md), and its forks."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr
from starlette.responses import Response

from simpleworkflow.server import bodies
from simpleworkflow.server.schemas import JSON, RunOut
from simpleworkflow.web import routing
from simpleworkflow.web.auth import Auth
from simpleworkflow.web.problems import responses
from simpleworkflow.web.source import ClientSource

RunId = Annotated[str, Path(description="the run's id (a UUID)", max_length=100)]


class ForkIn(BaseModel):
    """Where to fork from, and the new run's payload."""

    model_config = ConfigDict(extra="forbid")

    from_step: StrictStr | StrictInt = Field(
        description="the journal entry the fork starts at: a step's name, or its position "
        "(as /runs/{id}/steps gives it); it and every later entry run again",
        examples=["charge-card", 3],
    )
    payload: JSON = Field(
        default=None, description="the new run's payload (absent or null: the original's)"
    )


def router(source: ClientSource, auth: Auth, route_class: type[routing.GuardedRoute]) -> APIRouter:
    """Forks through the ``admin`` facade of ``source``'s client."""
    api = APIRouter(prefix="/runs", tags=["runs"], route_class=route_class)

    @api.post(
        "/{run_id}/fork",
        status_code=201,
        response_model=RunOut,
        dependencies=[auth.writer()],
        responses=responses(400, 401, 403, 404, 409, 413, 422, 503),
    )
    async def fork_run(run_id: RunId, request: ForkIn) -> Response:
        """Start a new run of a finished run's type whose journal holds the original's
        entries before ``from_step``; 404 for an unknown run or step, 409 for a run that
        has not finished or a fork point that is refused. The original is unchanged."""
        run = await source.client.admin.fork(run_id, request.from_step, request.payload)
        return bodies.respond(bodies.run(run), 201)

    @api.get(
        "/{run_id}/forks",
        response_model=list[RunOut],
        dependencies=[auth.reader()],
        responses=responses(401, 404, 503),
    )
    async def run_forks(
        run_id: RunId,
        limit: Annotated[int, Query(ge=1, le=1000, description="at most this many")] = 100,
    ) -> Response:
        """The runs forked from this one, oldest first."""
        forks = await source.client.admin.forks(run_id, limit=limit)
        return bodies.respond([bodies.run(run) for run in forks])

    return api
