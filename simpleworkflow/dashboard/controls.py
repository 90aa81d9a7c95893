"""The pages of what starts runs and what holds them back: cron schedules (with their
pause, resume and run-now forms) and the concurrency and rate limits. Each page reads through the
client's ``schedules`` facade or its ``admin`` facade, as the other pages do."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from simpleworkflow import errors, names
from simpleworkflow.dashboard.pages import DONE_MESSAGES
from simpleworkflow.dashboard.site import Site


def router(site: Site, route_class: type[Any]) -> APIRouter:
    controls = APIRouter(route_class=route_class, include_in_schema=False)

    @controls.get("/schedules", name="dashboard.schedules")
    async def schedules(request: Request) -> Response:
        session = await site.reader(request)
        found = await site.source.client.schedules.list()
        done = DONE_MESSAGES.get(request.query_params.get("done", ""))
        context = {"schedules": found, "done": done, "started": _started(request)}
        return site.render(request, session, "schedules.html", context)

    @controls.post("/schedules/{name}/pause", name="dashboard.pause_schedule")
    async def pause(request: Request, name: str) -> Response:
        await site.writer(request)
        await site.source.client.schedules.pause(name)
        return site.redirect(request, "dashboard.schedules", {"done": "schedule-paused"})

    @controls.post("/schedules/{name}/resume", name="dashboard.resume_schedule")
    async def resume(request: Request, name: str) -> Response:
        await site.writer(request)
        await site.source.client.schedules.resume(name)
        return site.redirect(request, "dashboard.schedules", {"done": "schedule-resumed"})

    @controls.post("/schedules/{name}/trigger", name="dashboard.trigger_schedule")
    async def trigger(request: Request, name: str) -> Response:
        await site.writer(request)
        run = await site.source.client.schedules.trigger(name)
        done = "schedule-triggered" if run.created else "schedule-triggered-already"
        return site.redirect(request, "dashboard.schedules", {"done": done, "run": run.id})

    @controls.get("/limits", name="dashboard.limits")
    async def limits(request: Request) -> Response:
        session = await site.reader(request)
        admin = site.source.client.admin
        stats = await admin.stats()
        rates = await admin.rate_limits()
        limited = [
            one
            for one in stats
            if one.registry is not None
            and (
                one.registry.concurrency is not None
                or one.registry.key_concurrency is not None
                or one.registry.rate_limit is not None
            )
        ]
        users = {
            rate.name: [
                one for one in limited if one.registry and one.registry.rate_limit == rate.name
            ]
            for rate in rates
        }
        context = {"limited": limited, "rates": rates, "users": users}
        return site.render(request, session, "limits.html", context)

    return controls


def _started(request: Request) -> str | None:
    """The run a "Run now" started, named after its done message: a run id or nothing,
    so that a link cannot make the page say anything else."""
    if not request.query_params.get("done", "").startswith("schedule-triggered"):
        return None
    try:
        return names.normalize_run_id(request.query_params.get("run", ""))
    except errors.RunNotFound:
        return None
