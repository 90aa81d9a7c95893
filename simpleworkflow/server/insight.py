"""``/workers`` and ``/throughput``: what the dashboard shows of the fleet, over HTTP, from
the same admin verbs. Their models are here rather than in ``schemas`` (which is at its
size limit); they describe the same ``to_dict`` bodies the CLI prints with ``--json``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field
from starlette.responses import Response

from simpleworkflow.admin import verbs
from simpleworkflow.server import bodies
from simpleworkflow.web import routing
from simpleworkflow.web.auth import Auth
from simpleworkflow.web.problems import responses
from simpleworkflow.web.source import ClientSource


class WorkerOut(BaseModel):
    """A worker as it records itself (presence) and as its leases show it; presence
    fields are null for a worker that records none (another runtime)."""

    worker_id: str
    state: Literal["live", "stopped", "gone"] = Field(
        description="live: seen within its lease; stopped: stopped gracefully; gone: not "
        "seen for a lease's length (died, froze or lost the database)"
    )
    runs: dict[str, int] = Field(description="runs it holds, by type")
    held: int
    next_expiry: datetime | None = Field(description="when its soonest lease runs out")
    last_renewed: datetime | None = Field(description="its last claim or lease renewal")
    expired: int = Field(description="leases of its that ran out, not yet reaped")
    host: str | None
    pid: int | None
    runtime: str | None
    type_prefixes: list[str] = Field(description="the type prefixes it claims")
    concurrency: int | None = Field(description="runs it may hold at once")
    version: str | None = Field(description="the simpleworkflow version it runs")
    started_at: datetime | None
    last_seen: datetime | None = Field(description="its last presence write")
    stopped_at: datetime | None


class WorkersOut(BaseModel):
    workers: list[WorkerOut] = Field(description="by id")


class MinuteOut(BaseModel):
    start: datetime = Field(description="the minute, by the database's clock")
    succeeded: int = Field(description="runs that succeeded")
    failed: int = Field(description="runs that failed for good")
    retried: int = Field(description="attempts that failed and will be retried")


class ThroughputOut(BaseModel):
    minutes: list[MinuteOut] = Field(description="oldest first, the current minute last")


def router(source: ClientSource, auth: Auth, route_class: type[routing.GuardedRoute]) -> APIRouter:
    """The fleet's reads through the ``admin`` facade of ``source``'s client."""
    api = APIRouter(tags=["workers"], route_class=route_class)

    @api.get(
        "/workers",
        response_model=WorkersOut,
        dependencies=[auth.reader()],
        responses=responses(401, 422, 503),
    )
    async def list_workers(
        gone_within: Annotated[
            str,
            Query(
                description="also workers stopped or gone within this long: seconds, or "
                "text such as '1h' (0: live ones only)",
                max_length=50,
            ),
        ] = "1h",
    ) -> Response:
        """The workers live now, idle ones included, and those stopped or gone lately,
        each with the runs it holds."""
        found = await source.client.admin.workers(gone_within=gone_within)
        return bodies.respond({"workers": [worker.to_dict() for worker in found]})

    @api.get(
        "/throughput",
        response_model=ThroughputOut,
        dependencies=[auth.reader()],
        responses=responses(401, 503),
    )
    async def throughput(
        minutes: Annotated[
            int,
            Query(ge=1, le=verbs.MAX_THROUGHPUT_MINUTES, description="how far back, in minutes"),
        ] = 60,
    ) -> Response:
        """Runs that succeeded or failed, and attempts that failed and will be retried,
        minute by minute, zeros included."""
        found = await source.client.admin.throughput(minutes)
        return bodies.respond({"minutes": [minute.to_dict() for minute in found]})

    return api
