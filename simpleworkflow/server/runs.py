"""``/runs``: start, list, read, cancel, retry, delete and signal runs.

Every endpoint is one call of the ``AsyncClient`` (or its ``admin`` facade) that the
server holds; the models of :mod:`~simpleworkflow.server.schemas` say what goes in and
out.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Path, Query
from starlette.responses import Response

from simpleworkflow import durations
from simpleworkflow.server import bodies
from simpleworkflow.server.schemas import (
    Cancelled,
    CancelRun,
    Deleted,
    EventOut,
    RunOut,
    RunPageOut,
    SendSignal,
    SignalOut,
    SignalSentOut,
    StartedRun,
    StartedRuns,
    StartRun,
    StartRuns,
    StepOut,
)
from simpleworkflow.web import routing
from simpleworkflow.web.auth import Auth
from simpleworkflow.web.problems import responses
from simpleworkflow.web.source import ClientSource

State = Literal[
    "pending",
    "leased",
    "succeeded",
    "failed",
    "cancelled",
    "sleeping",
    "waiting-signal",
    "waiting-child",
    "retrying",
    "throttled",
]

RunId = Annotated[str, Path(description="the run's id (a UUID)", max_length=100)]
READ_ERRORS = responses(401, 404, 503)
WRITE_ERRORS = responses(400, 401, 403, 404, 413, 422, 503)


def router(source: ClientSource, auth: Auth, route_class: type[routing.GuardedRoute]) -> APIRouter:
    """The ``/runs`` endpoints, on the client ``source`` gives."""
    api = APIRouter(prefix="/runs", tags=["runs"], route_class=route_class)
    _add_starts(api, source, [auth.writer()])
    _add_reads(api, source, [auth.reader()])
    _add_actions(api, source, [auth.writer()])
    return api


async def start_one(
    source: ClientSource, type: str, payload: Any, options: dict[str, Any]
) -> Response:
    """Start a run of ``type`` (a :class:`StartRun`'s fields): the answer of ``POST
    /runs``, whether its route or :mod:`~simpleworkflow.server.start_lane` took the
    request."""
    # Read before the start: a registry that cannot be read fails the request with
    # nothing written, rather than a run committed and the request answered 503.
    warnings = await source.registry.start_warnings(source.client.admin, type)
    run = await source.client.start(type, payload, **options)
    return bodies.respond(bodies.started(run, warnings), 201 if run.created else 200)


def _add_starts(api: APIRouter, source: ClientSource, writer: list[Any]) -> None:
    @api.post(
        "",
        status_code=201,
        response_model=StartedRun,
        dependencies=writer,
        responses={
            200: {
                "model": StartedRun,
                "description": "the idempotency key was held already, or a debounced start "
                "joined the pending run of its key",
            },
            **responses(400, 401, 403, 409, 413, 422, 503),
        },
    )
    async def start_run(request: StartRun) -> Response:
        """Start a run; a known idempotency key returns the run that holds it (200), as
        does a debounced start that joins the pending run of its key."""
        return await start_one(source, request.type, request.payload, request.options())

    @api.post(
        "/batch",
        status_code=201,
        response_model=StartedRuns,
        dependencies=writer,
        responses={
            200: {"model": StartedRuns, "description": "every key was held already"},
            **responses(400, 401, 403, 409, 413, 422, 503),
        },
    )
    async def start_runs(request: StartRuns) -> Response:
        """Start up to 1000 runs in one transaction: all of them, or none; a known
        idempotency key gives the run that holds it."""
        warnings = {
            type: await source.registry.start_warnings(source.client.admin, type)
            for type in {run.type for run in request.runs}
        }
        runs = await source.client.start_many(
            {"type": run.type, "payload": run.payload, **run.options()} for run in request.runs
        )
        created = sum(1 for run in runs if run.created)
        started = [bodies.started(run, warnings.get(run.type, [])) for run in runs]
        body = {"runs": started, "created": created}
        return bodies.respond(body, 201 if created else 200)


def _add_reads(api: APIRouter, source: ClientSource, reader: list[Any]) -> None:

    @api.get(
        "",
        response_model=RunPageOut,
        dependencies=reader,
        responses=responses(400, 401, 422, 503),
    )
    async def list_runs(
        type: Annotated[
            str | None,
            Query(
                description="a type ('billing.invoice.v1') or a prefix ('billing.', "
                "'billing.%', '%' for all)",
                max_length=300,
            ),
        ] = None,
        status: Annotated[
            list[State] | None,
            Query(description="any of these states (repeat the parameter for several)"),
        ] = None,
        created_since: Annotated[
            str | None, Query(description="created at or after (ISO 8601 with an offset)")
        ] = None,
        created_until: Annotated[
            str | None, Query(description="created before (ISO 8601 with an offset)")
        ] = None,
        payload_contains: Annotated[
            str | None,
            Query(
                description='JSON that the payload contains, as jsonb @> decides: {"customer": '
                '"c_1"}',
                max_length=65536,
            ),
        ] = None,
        include_deleted: Annotated[bool, Query(description="also soft-deleted runs")] = False,
        limit: Annotated[int, Query(ge=1, le=1000, description="runs per page")] = 50,
        cursor: Annotated[
            str | None, Query(description="the next_cursor of the page before", max_length=500)
        ] = None,
    ) -> Response:
        """One page of runs, newest first."""
        page = await source.client.list(
            type_prefix=type,
            status=status,
            created_after=_moment("created_since", created_since),
            created_before=_moment("created_until", created_until),
            payload_contains=_pattern(payload_contains),
            include_deleted=include_deleted,
            limit=limit,
            cursor=cursor,
        )
        runs = [bodies.run(run) for run in page.runs]
        return bodies.respond({"runs": runs, "next_cursor": page.next_cursor})

    @api.get("/{run_id}", response_model=RunOut, dependencies=reader, responses=READ_ERRORS)
    async def get_run(run_id: RunId) -> Response:
        """A run: its payload, result or error, status, attempts, lease and waits."""
        return bodies.respond(bodies.run(await source.client.get(run_id)))

    @api.get(
        "/{run_id}/events",
        response_model=list[EventOut],
        dependencies=reader,
        responses=READ_ERRORS,
    )
    async def run_events(run_id: RunId) -> Response:
        """The run's audit trail, oldest first."""
        events = await source.client.admin.events(run_id)
        return bodies.respond([bodies.event(event) for event in events])

    @api.get(
        "/{run_id}/steps",
        response_model=list[StepOut],
        dependencies=reader,
        responses=READ_ERRORS,
    )
    async def run_steps(run_id: RunId) -> Response:
        """A workflow run's journal, with when each call started and completed, and what
        each is doing (a step that gave up is ``failed``; one between tries
        ``retrying``, with ``at``, its next try; a wait ``waiting``, with what for)."""
        run = await source.client.get(run_id)
        steps = await source.client.admin.steps(run.id)
        now = datetime.now(UTC)
        return bodies.respond([bodies.step(entry, run, now) for entry in steps])

    @api.get(
        "/{run_id}/children",
        response_model=list[RunOut],
        dependencies=reader,
        responses=READ_ERRORS,
    )
    async def run_children(
        run_id: RunId,
        limit: Annotated[int, Query(ge=1, le=1000, description="at most this many")] = 100,
    ) -> Response:
        """The runs it started (``ctx.start_child``), oldest first."""
        children = await source.client.admin.children(run_id, limit=limit)
        return bodies.respond([bodies.run(run) for run in children])

    @api.get(
        "/{run_id}/signals",
        response_model=list[SignalOut],
        dependencies=reader,
        responses=READ_ERRORS,
    )
    async def run_signals(run_id: RunId) -> Response:
        """The signals sent to the run, consumed or still waiting for a wait."""
        signals = await source.client.signals(run_id)
        return bodies.respond([bodies.signal(signal) for signal in signals])


def _add_actions(api: APIRouter, source: ClientSource, writer: list[Any]) -> None:

    @api.post(
        "/{run_id}/cancel", response_model=Cancelled, dependencies=writer, responses=WRITE_ERRORS
    )
    async def cancel_run(
        run_id: RunId, request: Annotated[CancelRun | None, Body()] = None
    ) -> Response:
        """Cancel a pending or leased run and its unfinished children; ``cancelled`` is
        false for a run that had already finished."""
        reason = None if request is None else request.reason
        done, run = await source.client.cancel_and_get(run_id, reason=reason)
        return bodies.respond({"cancelled": done, "run": bodies.run(run)})

    @api.post(
        "/{run_id}/retry",
        response_model=RunOut,
        dependencies=writer,
        responses=responses(401, 403, 404, 409, 503),
    )
    async def retry_run(run_id: RunId) -> Response:
        """Run a failed or cancelled run again, on the same id (409 for any other)."""
        return bodies.respond(bodies.run(await source.client.admin.retry(run_id)))

    @api.delete(
        "/{run_id}",
        response_model=Deleted,
        dependencies=writer,
        responses=responses(401, 403, 404, 503),
    )
    async def delete_run(run_id: RunId) -> Response:
        """Soft-delete a run: no longer claimed nor listed; still readable by id."""
        return bodies.respond({"deleted": await source.client.delete(run_id)})

    @api.post(
        "/{run_id}/signals",
        status_code=201,
        response_model=SignalSentOut,
        dependencies=writer,
        responses={**WRITE_ERRORS, **responses(409)},
    )
    async def send_signal(run_id: RunId, request: SendSignal) -> Response:
        """Send a signal to a run: a wait_for_event for it consumes it (409 once the run
        has finished)."""
        sent = await source.client.signal(run_id, request.event, request.payload)
        return bodies.respond(bodies.signal_sent(sent), 201)


def _moment(what: str, text: str | None) -> datetime | None:
    """A query's time: ISO 8601 with its offset, in the range ``Client.list`` takes."""
    return None if text is None else durations.parse_time(text, what=what)


def _pattern(text: str | None) -> Any:
    return None if text is None else routing.parse_json(text, "payload_contains")
