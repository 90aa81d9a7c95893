"""The forms that change state: cancel, retry, fork and signal a run, cancel or retry many,
pause and resume a type, log in and out. Each checks its session first
(:meth:`Site.writer`: CSRF token, Origin, a token that may write), then makes one call
of the client or its ``admin`` facade per run."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from simpleworkflow import errors
from simpleworkflow.client import AsyncClient
from simpleworkflow.dashboard import sessions
from simpleworkflow.dashboard.pages import RunFilter, run_context
from simpleworkflow.dashboard.site import Site
from simpleworkflow.models import Run, RunStatus
from simpleworkflow.web.problems import ApiProblem
from simpleworkflow.web.routing import parse_json

#: The most runs one bulk action touches; the confirmation says when more match.
BULK_LIMIT = 500
#: How many cancels of a bulk action are under way at once.
BULK_CANCELS_AT_ONCE = 16
#: The most runs a confirmation reads to find those (it pages through the filter).
BULK_SCAN = 10_000
REASON = "cancelled from the dashboard"

Bulk = Literal["cancel", "retry"]
#: Which runs each bulk action can act on: the others are left out of its count.
_ELIGIBLE: dict[str, Callable[[Run], bool]] = {
    "cancel": lambda run: run.status in (RunStatus.PENDING, RunStatus.LEASED),
    "retry": lambda run: (
        run.status in (RunStatus.FAILED, RunStatus.CANCELLED) and run.deleted_at is None
    ),
}


def router(site: Site, route_class: type[Any]) -> APIRouter:
    acts = APIRouter(route_class=route_class, include_in_schema=False)
    _add_run_actions(acts, site)
    _add_bulk(acts, site)
    _add_types_and_login(acts, site)
    return acts


def _add_run_actions(acts: APIRouter, site: Site) -> None:

    @acts.post("/runs/{run_id}/cancel", name="dashboard.cancel")
    async def cancel(request: Request, run_id: str) -> Response:
        await site.writer(request)
        done = await site.source.client.cancel(run_id, reason=REASON)
        query = {"done": "cancelled" if done else "not-cancelled"}
        return site.redirect(request, "dashboard.run", query, run_id=run_id)

    @acts.post("/runs/{run_id}/retry", name="dashboard.retry")
    async def retry(request: Request, run_id: str) -> Response:
        await site.writer(request)
        await site.source.client.admin.retry(run_id)
        return site.redirect(request, "dashboard.run", {"done": "retried"}, run_id=run_id)

    @acts.post("/runs/{run_id}/fork", name="dashboard.fork")
    async def fork(request: Request, run_id: str) -> Response:
        session, form = await site.writer(request)
        step = str(form.get("step", ""))
        text = str(form.get("payload", "")).strip()
        try:
            payload = parse_json(text, "the fork's payload") if text else None
            made = await site.source.client.admin.fork(run_id, step, payload)
        except (ApiProblem, errors.InvalidInput) as exc:
            message = exc.detail if isinstance(exc, ApiProblem) else str(exc)
            context = await run_context(
                site, request, run_id, fork_error=message, fork_step=step, fork_payload=text
            )
            return site.render(request, session, "run.html", context, status=422)
        return site.redirect(request, "dashboard.run", {"done": "forked"}, run_id=made.id)

    @acts.post("/runs/{run_id}/signal", name="dashboard.signal")
    async def signal(request: Request, run_id: str) -> Response:
        session, form = await site.writer(request)
        event = str(form.get("event", "")).strip()
        text = str(form.get("payload", "")).strip()
        try:
            payload = parse_json(text, "the signal's payload") if text else None
            sent = await site.source.client.signal(run_id, event, payload)
        except (ApiProblem, errors.InvalidInput) as exc:
            message = exc.detail if isinstance(exc, ApiProblem) else str(exc)
            context = await run_context(
                site,
                request,
                run_id,
                signal_error=message,
                signal_event=event,
                signal_payload=text,
            )
            return site.render(request, session, "run.html", context, status=422)
        query = {"done": "signalled-woke" if sent.woke else "signalled"}
        return site.redirect(request, "dashboard.run", query, run_id=run_id)


def _add_bulk(acts: APIRouter, site: Site) -> None:

    @acts.get("/bulk/{action}", name="dashboard.bulk")
    async def confirm(request: Request, action: Bulk) -> Response:
        """The confirmation: the runs the filter matches that the action applies to,
        counted and listed; the form posts exactly those ids."""
        session = await site.reader(request)
        filters = RunFilter.of(request)
        found, more = await _eligible(site, filters, action)
        context = {"action": action, "runs": found, "more": more, "filters": filters}
        return site.render(request, session, "bulk.html", context)

    @acts.post("/bulk/{action}", name="dashboard.bulk_act")
    async def act(request: Request, action: Bulk) -> Response:
        session, form = await site.writer(request)
        ids = [str(one) for one in form.getlist("run_id")][:BULK_LIMIT]
        client = site.source.client
        done = 0
        if action == "cancel":
            done = await _cancel_all(client, ids)
        for run_id in ids if action == "retry" else ():
            try:
                await client.admin.retry(run_id)
                done += 1
            except (errors.RunNotRetryable, errors.RunNotFound):
                continue  # it changed since the confirmation: counted as skipped
        context = {"action": action, "asked": len(ids), "done": done}
        return site.render(request, session, "bulk_done.html", context)


async def _cancel_all(client: AsyncClient, ids: list[str]) -> int:
    """Cancel ``ids``, a few at a time; how many took effect. A cancel of a leased run
    returns 0.2 s after its commit (no step begins after it): one after the other, 500
    would take 100 s."""
    gate = asyncio.Semaphore(BULK_CANCELS_AT_ONCE)

    async def cancel(run_id: str) -> bool:
        async with gate:
            try:
                return await client.cancel(run_id, reason=REASON)
            except errors.RunNotFound:
                return False  # it changed since the confirmation: counted as skipped

    return sum(await asyncio.gather(*(cancel(run_id) for run_id in ids)))


async def _eligible(site: Site, filters: RunFilter, action: str) -> tuple[list[Run], bool]:
    """Up to :data:`BULK_LIMIT` runs of the filter the action applies to, and whether
    more match."""
    client = site.source.client
    wanted = _ELIGIBLE[action]
    found: list[Run] = []
    cursor: str | None = None
    read = 0
    while read < BULK_SCAN:
        page = await client.list(**filters.options(), limit=1000, cursor=cursor)
        read += len(page.runs)
        for run in page.runs:
            if wanted(run):
                if len(found) == BULK_LIMIT:
                    return found, True
                found.append(run)
        cursor = page.next_cursor
        if cursor is None:
            return found, False
    return found, True


def _add_types_and_login(acts: APIRouter, site: Site) -> None:

    @acts.post("/types/{type}/pause", name="dashboard.pause")
    async def pause(request: Request, type: str) -> Response:
        await site.writer(request)
        await site.source.client.admin.pause(type)
        return site.redirect(request, "dashboard.types", {"done": "paused"})

    @acts.post("/types/{type}/resume", name="dashboard.resume")
    async def resume(request: Request, type: str) -> Response:
        await site.writer(request)
        await site.source.client.admin.resume(type)
        return site.redirect(request, "dashboard.types", {"done": "resumed"})

    @acts.get("/login", name="dashboard.login")
    async def login_form(request: Request) -> Response:
        session = await site.session(request)
        return site.render(request, session, "login.html", {"error": None, "next": _next(request)})

    @acts.post("/login", name="dashboard.login_post")
    async def login(request: Request) -> Response:
        session = await site.session(request)
        form = await request.form()
        presented = form.get(sessions.CSRF_FIELD)
        site.sessions.check_form(
            request, session, presented if isinstance(presented, str) else None
        )
        opened = site.sessions.log_in(str(form.get("token", "")).strip())
        if opened is None:
            context = {
                "error": "That token is not valid.",
                "next": _next(request, form.get("next")),
            }
            return site.render(request, session, "login.html", context, status=401)
        response = site.redirect(request, "dashboard.overview")
        target = _next(request, form.get("next"))
        if target:
            response.headers["location"] = target
        sessions.set_cookie(response, request, opened)
        return response

    @acts.post("/logout", name="dashboard.logout")
    async def logout(request: Request) -> Response:
        """End the session on the server (its cookie and CSRF token are refused from
        now on) and in the browser. A session that had already ended has nothing to end.
        When the store cannot be reached the page says so (503), and the browser still
        forgets its cookie."""
        try:
            session = await site.session(request)
            if session.can_read:
                form = await request.form()
                presented = form.get(sessions.CSRF_FIELD)
                site.sessions.check_form(
                    request, session, presented if isinstance(presented, str) else None
                )
                await site.sessions.log_out(session)
            response = site.redirect(request, "dashboard.login")
        except errors.StoreUnavailable as exc:
            response = site.failure(request, exc)
        sessions.clear_cookie(response, request)
        return response


def _next(request: Request, given: object = None) -> str:
    """Where to go after logging in: a path under the dashboard, or ``""`` (its home).

    Browsers drop tabs and newlines from a URL and read a backslash as a slash, so
    ``/%09/evil.example`` (decoded: a tab between two slashes) would lead to another
    site, and a CR or LF cannot go in a header at all. So the target, and the target
    percent-decoded once more, must each be printable ASCII without a backslash, begin
    with the mount's path and ``/`` but not ``//``, and name no scheme or host.
    """
    target = given if isinstance(given, str) else request.query_params.get("next", "")
    root = str(request.scope.get("root_path") or "")
    if _same_site_path(target, root) and _same_site_path(unquote(target), root):
        return target
    return ""


def _same_site_path(target: str, root: str) -> bool:
    if not target.isascii() or not target.isprintable() or " " in target or "\\" in target:
        return False
    parts = urlsplit(target)
    return (
        target.startswith(root + "/")
        and not target.startswith("//")
        and not parts.scheme
        and not parts.netloc
    )
