"""The pages that read: overview, runs, a run (and its streams, live), types, workers.
Each reads through the ``AsyncClient`` (and its ``admin`` facade) that the site holds."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from simpleworkflow import durations, errors
from simpleworkflow.admin import STATES
from simpleworkflow.dashboard import views
from simpleworkflow.dashboard.sessions import Refused
from simpleworkflow.dashboard.site import Site
from simpleworkflow.models import Run
from simpleworkflow.web import sse
from simpleworkflow.web.problems import ApiProblem
from simpleworkflow.web.routing import parse_json

#: Runs per page of the runs list.
PAGE_SIZE = 50
#: How often a live stream asks again whether its session may still read.
SESSION_RECHECK_SECONDS = 5.0
#: What a page says after an action redirected to it (``?done=``): fixed texts, so that
#: a link cannot make the page say anything else.
DONE_MESSAGES = {
    "cancelled": "The run was cancelled.",
    "not-cancelled": "The run had already finished: nothing was cancelled.",
    "retried": "The run was given a new attempt.",
    "forked": "This run was forked: it replays the original's journal before its step.",
    "signalled": "The signal was sent.",
    "signalled-woke": "The signal was sent, and woke the run.",
    "paused": "The type was paused: no worker claims its runs until it is resumed.",
    "resumed": "The type was resumed.",
    "schedule-paused": "The schedule was paused: it starts no run until it is resumed.",
    "schedule-resumed": "The schedule was resumed: it starts runs again from its next tick.",
    "schedule-triggered": "The schedule started a run now; its next tick is unchanged.",
    "schedule-triggered-already": "The schedule was started by hand within this second "
    "already: nothing more was started.",
}


@dataclass
class RunFilter:
    """The runs list's filters, as the form gives them (text), and what they mean."""

    type: str = ""
    status: list[str] = field(default_factory=list)
    since: str = ""
    until: str = ""
    payload: str = ""

    @classmethod
    def of(cls, request: Request) -> RunFilter:
        query = request.query_params
        return cls(
            type=query.get("type", "").strip(),
            status=[s for s in query.getlist("status") if s],
            since=query.get("since", "").strip(),
            until=query.get("until", "").strip(),
            payload=query.get("payload", "").strip(),
        )

    def options(self) -> dict[str, Any]:
        """``AsyncClient.list`` arguments; :class:`~simpleworkflow.errors.InvalidArgument`
        for a filter that does not parse."""
        return {
            "type_prefix": self.type or None,
            "status": self.status or None,
            "created_after": _moment("since", self.since),
            "created_before": _moment("until", self.until),
            "payload_contains": _payload(self.payload),
        }

    def query(self) -> list[tuple[str, str]]:
        """The filters as query parameters, for links that keep them."""
        pairs = [("type", self.type), ("since", self.since), ("until", self.until)]
        pairs += [("payload", self.payload)]
        return [(k, v) for k, v in pairs if v] + [("status", s) for s in self.status]


def router(site: Site, route_class: type[Any]) -> APIRouter:
    pages = APIRouter(route_class=route_class, include_in_schema=False)

    @pages.get("/", name="dashboard.overview")
    async def overview(request: Request) -> Response:
        session = await site.reader(request)
        admin = site.source.client.admin
        stats = await admin.stats()
        minutes = await admin.throughput(60)
        overdue = [
            one
            for one in stats
            if one.oldest_due is not None and one.oldest_due > site.options.overdue_after
        ]
        context = {
            "stats": stats,
            "states": STATES,
            "overdue": overdue,
            "paused": [one for one in stats if one.paused],
            "series": views.chart_series(minutes),
            # Outcomes, as the audit trail counts them: a run ends once, unless an
            # operator retries it (it ends again); a retried attempt is no ending.
            "succeeded": sum(m.succeeded for m in minutes),
            "failed": sum(m.failed for m in minutes),
            "retried": sum(m.retried for m in minutes),
        }
        return site.render(request, session, "overview.html", context)

    @pages.get("/runs", name="dashboard.runs")
    async def runs(request: Request) -> Response:
        session = await site.reader(request)
        filters = RunFilter.of(request)
        cursor = request.query_params.get("cursor") or None
        context: dict[str, Any] = {
            "filters": filters,
            "states": STATES,
            "runs": [],
            "next_cursor": None,
            "error": None,
        }
        try:
            page = await site.source.client.list(
                **filters.options(), limit=PAGE_SIZE, cursor=cursor
            )
        except errors.InvalidInput as exc:
            context["error"] = str(exc)
            return site.render(request, session, "runs.html", context, status=422)
        context.update(runs=page.runs, next_cursor=page.next_cursor, cursor=cursor)
        return site.render(request, session, "runs.html", context)

    @pages.get("/runs/{run_id}", name="dashboard.run")
    async def run(request: Request, run_id: str) -> Response:
        session = await site.reader(request)
        return site.render(request, session, "run.html", await run_context(site, request, run_id))

    @pages.get("/runs/{run_id}/streams/{key}", name="dashboard.stream")
    async def stream(request: Request, run_id: str, key: str) -> Response:
        """One of the run's streams as Server-Sent Events, for the run page's script: on
        the session's cookie, since a browser's ``EventSource`` sends no token."""
        await site.reader(request)
        after = _offset(request.query_params.get("after"))
        start = sse.resume(after, request.headers.get("last-event-id"))
        await site.source.client.get(run_id)  # a 404 page before the events begin
        items = site.source.client.read_stream(run_id, key, after=start)
        return sse.response(items, _still_logged_in(site, request))

    @pages.get("/types", name="dashboard.types")
    async def types(request: Request) -> Response:
        session = await site.reader(request)
        stats = await site.source.client.admin.stats()
        done = DONE_MESSAGES.get(request.query_params.get("done", ""))
        context = {"stats": stats, "states": STATES, "done": done}
        return site.render(request, session, "types.html", context)

    @pages.get("/workers", name="dashboard.workers")
    async def workers(request: Request) -> Response:
        session = await site.reader(request)
        admin = site.source.client.admin
        found = sorted(await admin.workers(), key=lambda w: w.state != "live")  # live first
        queues = await admin.queues()
        context = {"workers": found, "queues": queues, "now": datetime.now(UTC)}
        return site.render(request, session, "workers.html", context)

    return pages


async def run_context(site: Site, request: Request, run_id: str, **extra: Any) -> dict[str, Any]:
    """What a run's page shows: the run, its journal as a timeline, its audit trail, its
    signals, the values it published, streams (their first items), parent and children."""
    client = site.source.client
    found: Run = await client.get(run_id)
    events = await client.admin.events(found.id)
    steps = await client.admin.steps(found.id)
    signals = await client.signals(found.id)
    children = await client.admin.children(found.id)
    forks = await client.admin.forks(found.id)
    published = any(step.kind == "value" for step in steps)  # read only for runs that did
    streams = [
        (s, await client.stream_items(found.id, s.key, limit=50))
        for s in await client.streams(found.id)
    ]
    return {
        "run": found,
        "events": events,
        "steps": steps,
        "signals": signals,
        "values": await client.values(found.id) if published else [],
        "pending_signals": [s for s in signals if not s.consumed],
        "children": children,
        "forks": forks,
        "fork_points": [
            s.step_name for s in steps if "/" not in s.step_name and s.kind != "rollback"
        ],
        "fork_error": None,
        "fork_step": "",
        "fork_payload": "",
        "streams": streams,
        "timeline": views.timeline(found, steps, events, datetime.now(UTC)),
        "traceback": views.traceback_of(events),
        "done": DONE_MESSAGES.get(request.query_params.get("done", "")),
        "signal_error": None,
        "signal_event": "",
        "signal_payload": "",
        **extra,
    }


def _still_logged_in(site: Site, request: Request) -> Callable[[], Awaitable[bool]]:
    """Whether the session that opened a live stream may still read, asked again at most
    every :data:`SESSION_RECHECK_SECONDS` while items flow: a logout or the session's end
    stops the stream (its script then says so), as it refuses the next page."""
    checked = time.monotonic()

    async def allowed() -> bool:
        nonlocal checked
        if time.monotonic() - checked < SESSION_RECHECK_SECONDS:
            return True
        checked = time.monotonic()
        try:
            return (await site.sessions.of(request)).can_read
        except Refused:
            return False

    return allowed


def _offset(text: str | None) -> int | None:
    if text is None or text == "":
        return None
    if not text.isdigit():
        raise errors.InvalidArgument(f"after must be an item's offset, not {text!r:.40}")
    return int(text)


def _moment(what: str, text: str) -> datetime | None:
    """A time from the filter form: ISO 8601, UTC when it names no offset (the form's
    ``datetime-local`` input gives none)."""
    return durations.parse_time(text, what=what, naive_utc=True) if text else None


def _payload(text: str) -> Any:
    if not text:
        return None
    try:
        return parse_json(text, "the payload filter")
    except ApiProblem as exc:
        raise errors.InvalidArgument(exc.detail) from None
