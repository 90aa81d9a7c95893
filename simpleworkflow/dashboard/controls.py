"""The pages of what starts runs and what holds them back: cron schedules (with their
pause and resume forms) and the concurrency and rate limits. Each page reads through the
client's ``schedules`` facade or its ``admin`` facade, as the other pages do."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from simpleworkflow.dashboard.pages import DONE_MESSAGES
from simpleworkflow.dashboard.site import Site


def router(site: Site, route_class: type[Any]) -> APIRouter:
    controls = APIRouter(route_class=route_class, include_in_schema=False)

    @controls.get("/schedules", name="dashboard.schedules")
    async def schedules(request: Request) -> Response:
        session = await site.reader(request)
        found = await site.source.client.schedules.list()
        done = DONE_MESSAGES.get(request.query_params.get("done", ""))
        return site.render(request, session, "schedules.html", {"schedules": found, "done": done})

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
