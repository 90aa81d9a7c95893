"""``/schedules``: cron schedules over HTTP, through the ``schedules`` facade of the
client (see docs/schedules.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from starlette.responses import Response

from simpleworkflow.admin import unclaimed
from simpleworkflow.server import bodies
from simpleworkflow.server.schedule_schemas import CreateSchedule, ScheduleDeleted, ScheduleOut
from simpleworkflow.server.schemas import StartedRun
from simpleworkflow.web import routing
from simpleworkflow.web.auth import Auth
from simpleworkflow.web.problems import responses
from simpleworkflow.web.source import ClientSource

Name = Annotated[
    str, Path(description="the schedule's name, e.g. billing.invoice.nightly", max_length=200)
]


def router(source: ClientSource, auth: Auth, route_class: type[routing.GuardedRoute]) -> APIRouter:
    """List, read, create or change, pause, resume, trigger and delete schedules."""
    api = APIRouter(tags=["schedules"], route_class=route_class)
    registry = unclaimed.RegistryView()
    one_errors = responses(400, 401, 403, 404, 413, 422, 503)

    @api.get(
        "/schedules",
        response_model=list[ScheduleOut],
        dependencies=[auth.reader()],
        responses=responses(401, 422, 503),
    )
    async def list_schedules(
        type: Annotated[
            str | None, Query(description="only those that start this type", max_length=200)
        ] = None,
    ) -> Response:
        """Every schedule by name, or those that start one workflow type."""
        found = await source.client.schedules.list(type=type)
        return bodies.respond([one.to_dict() for one in found])

    @api.get(
        "/schedules/{name}",
        response_model=ScheduleOut,
        dependencies=[auth.reader()],
        responses=responses(401, 404, 422, 503),
    )
    async def get_schedule(name: Name) -> Response:
        """One schedule; 404 if there is none of that name."""
        return bodies.respond((await source.client.schedules.get(name)).to_dict())

    @api.put(
        "/schedules/{name}",
        response_model=ScheduleOut,
        dependencies=[auth.writer()],
        responses=responses(400, 401, 403, 413, 422, 503),
    )
    async def create_schedule(name: Name, request: CreateSchedule) -> Response:
        """Create the schedule, or give the one of that name this definition (its pause
        is kept; its next tick is planned again if the cron or time zone changed)."""
        made = await source.client.schedules.create(
            name,
            request.type,
            cron=request.cron,
            tz=request.tz,
            payload=request.payload,
            missed=request.missed,
            priority=request.priority,
            max_attempts=request.max_attempts,
        )
        return bodies.respond(made.to_dict())

    @api.post(
        "/schedules/{name}/pause",
        response_model=ScheduleOut,
        dependencies=[auth.writer()],
        responses=one_errors,
    )
    async def pause_schedule(name: Name) -> Response:
        """Start no more runs until resumed; runs already started go on."""
        return bodies.respond((await source.client.schedules.pause(name)).to_dict())

    @api.post(
        "/schedules/{name}/resume",
        response_model=ScheduleOut,
        dependencies=[auth.writer()],
        responses=one_errors,
    )
    async def resume_schedule(name: Name) -> Response:
        """Start runs again from the next tick after now (the paused ticks are skipped)."""
        return bodies.respond((await source.client.schedules.resume(name)).to_dict())

    @api.post(
        "/schedules/{name}/trigger",
        status_code=201,
        response_model=StartedRun,
        dependencies=[auth.writer()],
        responses={
            200: {
                "model": StartedRun,
                "description": "the schedule was triggered within the same second already: "
                "the run that trigger started",
            },
            **responses(400, 401, 403, 404, 409, 413, 422, 503),
        },
    )
    async def trigger_schedule(name: Name) -> Response:
        """Start one run of the schedule now, outside its ticks, as a tick would (its
        payload with `schedule`, `scheduled_for` (now) and `triggered: true`); its next
        tick does not move, and a paused schedule may be triggered too. Triggered again
        within the same second, it returns that run (200)."""
        found = await source.client.schedules.get(name)
        # Read before the start, as a start does: a registry that cannot be read fails
        # the request with nothing written.
        warnings = await registry.start_warnings(source.client.admin, found.workflow_type)
        run = await source.client.schedules.trigger(name)
        return bodies.respond(bodies.started(run, warnings), 201 if run.created else 200)

    @api.delete(
        "/schedules/{name}",
        response_model=ScheduleDeleted,
        dependencies=[auth.writer()],
        responses=responses(400, 401, 403, 413, 422, 503),
    )
    async def delete_schedule(name: Name) -> Response:
        """Delete the schedule; runs it started go on."""
        return bodies.respond({"deleted": await source.client.schedules.delete(name)})

    return api
