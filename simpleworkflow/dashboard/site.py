"""What every page and action of the dashboard shares: the client, the sessions, the
templates, and a route class that turns refusals and the engine's errors into pages."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, ClassVar
from urllib.parse import urlencode

import jinja2
from fastapi.routing import APIRoute
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from simpleworkflow import errors
from simpleworkflow.dashboard import sessions, views
from simpleworkflow.dashboard.sessions import Refused, Session, Sessions
from simpleworkflow.web.auth import Auth
from simpleworkflow.web.problems import detail as public_detail
from simpleworkflow.web.problems import log_unexpected
from simpleworkflow.web.source import ClientSource

#: What a page may load and run: its own files only. Every script is a static file, so
#: text that slipped through into the page could still not run.
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
#: The engine's errors a page shows, with the status of the response.
_STATUSES: tuple[tuple[type[errors.SimpleWorkflowError], int], ...] = (
    (errors.RunNotFound, 404),
    (errors.TypeNotRegistered, 404),
    (errors.ScheduleNotFound, 404),
    (errors.RunFinished, 409),
    (errors.RunNotRetryable, 409),
    (errors.InvalidInput, 422),
    (errors.StoreUnavailable, 503),
    (errors.SchemaError, 503),
)

Handler = Callable[[Request], Coroutine[Any, Any, Response]]
OVERDUE_ENV = "SIMPLEWORKFLOW_DASHBOARD_OVERDUE_SECONDS"
REFRESH_ENV = "SIMPLEWORKFLOW_DASHBOARD_REFRESH_SECONDS"
SESSION_ENV = "SIMPLEWORKFLOW_DASHBOARD_SESSION_SECONDS"
MAX_SESSION_SECONDS = 400 * 86400
#: Where a request keeps its checked session (``request.state``).
_SESSION_STATE = "simpleworkflow_dashboard_session"


@dataclass(frozen=True, slots=True)
class Options:
    """How the dashboard behaves."""

    #: A due run unclaimed for longer than this many seconds is overdue: the overview
    #: shows a banner.
    overdue_after: float = 60.0
    #: How often the overview (and an unfinished run's page) refreshes itself, seconds.
    refresh_seconds: float = 5.0
    #: How long a login lasts, seconds: the server refuses its cookie afterwards.
    session_seconds: float = sessions.DEFAULT_LIFETIME_SECONDS

    def __post_init__(self) -> None:
        for name in ("overdue_after", "refresh_seconds", "session_seconds"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0 < value < math.inf
            ):
                raise errors.ConfigurationError(
                    f"{name} must be a number of seconds > 0, not {value!r}"
                )
        if self.session_seconds > MAX_SESSION_SECONDS:
            raise errors.ConfigurationError(
                f"session_seconds must be at most {MAX_SESSION_SECONDS} (400 days, the "
                f"longest a browser keeps a cookie), not {self.session_seconds!r}"
            )

    @classmethod
    def from_env(cls) -> Options:
        """The options of ``$SIMPLEWORKFLOW_DASHBOARD_OVERDUE_SECONDS``,
        ``$SIMPLEWORKFLOW_DASHBOARD_REFRESH_SECONDS`` and
        ``$SIMPLEWORKFLOW_DASHBOARD_SESSION_SECONDS``, else the defaults: what
        ``simpleworkflow serve`` takes."""
        found: dict[str, float] = {}
        for name, variable in (
            ("overdue_after", OVERDUE_ENV),
            ("refresh_seconds", REFRESH_ENV),
            ("session_seconds", SESSION_ENV),
        ):
            text = os.environ.get(variable, "").strip()
            if text:
                try:
                    found[name] = float(text)
                except ValueError:
                    raise errors.ConfigurationError(
                        f"${variable} must be a number of seconds, not {text!r}"
                    ) from None
        return cls(**found)


class Site:
    """The dashboard's shared parts, one per router."""

    def __init__(self, source: ClientSource, auth: Auth, options: Options) -> None:
        self.source = source
        self.sessions = Sessions(auth, options.session_seconds, shared=lambda: source.client.admin)
        self.options = options
        env = jinja2.Environment(
            loader=jinja2.PackageLoader("simpleworkflow.dashboard", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        env.filters.update(
            age=views.age,
            moment=views.moment,
            pretty=views.pretty_json,
            compact=views.compact,
            long_texts=views.long_texts,
            step_state=views.step_state,
        )
        self.templates = Jinja2Templates(env=env)

    @property
    def auth_enabled(self) -> bool:
        return self.sessions.auth.enabled

    async def session(self, request: Request) -> Session:
        """The request's session (:meth:`Sessions.of`), checked once per request: a
        logged-in session costs at most one read of the store's logouts."""
        found = getattr(request.state, _SESSION_STATE, None)
        if not isinstance(found, Session):
            found = await self.sessions.of(request)
            setattr(request.state, _SESSION_STATE, found)
        return found

    async def reader(self, request: Request) -> Session:
        """The session of a request that reads; 401 when not logged in."""
        session = await self.session(request)
        if not session.can_read:
            raise Refused(401, "log in with a token to see this page")
        return session

    async def writer(self, request: Request) -> tuple[Session, FormData]:
        """The session and form of a request that changes state, checked: logged in,
        from this site with its CSRF token, and allowed to write (403 for a read-only
        token)."""
        session = await self.reader(request)
        form = await request.form()
        token = form.get(sessions.CSRF_FIELD)
        self.sessions.check_form(request, session, token if isinstance(token, str) else None)
        if not session.can_write:
            raise Refused(403, "this token may only read: actions need the full token")
        return session, form

    def render(
        self,
        request: Request,
        session: Session,
        template: str,
        context: Mapping[str, Any],
        status: int = 200,
    ) -> HTMLResponse:
        """A page, with the session's cookie set when it is new."""
        values = {
            "request": request,
            "session": session,
            "path": _path_maker(request),
            "auth_enabled": self.auth_enabled,
            "options": self.options,
            "csrf_field": sessions.CSRF_FIELD,
            "active": "",  # the page's entry in the menu: a page's template sets its own
            **context,
        }
        response = self.templates.TemplateResponse(
            request, template, values, status_code=status, headers=_SECURITY_HEADERS
        )
        sessions.set_cookie(response, request, session)
        return response

    def redirect(
        self, request: Request, name: str, query: Mapping[str, str] | None = None, **params: str
    ) -> Response:
        """A 303 to the page ``name`` (a route name) after a form: the browser GETs it."""
        url = _path_maker(request)(name, **params)
        if query:
            url += "?" + urlencode(query)
        return RedirectResponse(url, status_code=303)

    def refusal(self, request: Request, refused: Refused) -> Response:
        if refused.status == 401 and request.method == "GET":
            login = _path_maker(request)("dashboard.login")
            return RedirectResponse(f"{login}?{urlencode({'next': request.url.path})}", 303)
        session = Session(level=None, nonce="", csrf="")
        return self.render(
            request, session, "error.html", {"message": refused.message}, status=refused.status
        )

    def failure(self, request: Request, exc: errors.SimpleWorkflowError) -> Response:
        status = next((code for cls, code in _STATUSES if isinstance(exc, cls)), 500)
        # The session checked before the error, if any: no second read of the store,
        # and a session that could not be checked is shown as no session.
        session = getattr(request.state, _SESSION_STATE, None)
        if not isinstance(session, Session):
            session = Session(level=None, nonce="", csrf="")
        if status == 500:  # no request should cause it: logged with its traceback, by id
            error_id = log_unexpected(exc, f"{request.method} {request.url.path}")
            message = (
                f"An unexpected error; the server's log holds its details under the id {error_id}."
            )
        else:
            message = public_detail(exc)
        return self.render(request, session, "error.html", {"message": message}, status=status)


class PageRoute(APIRoute):
    """A dashboard route: a refusal or an engine error becomes a page (or, for a page
    that needs a login, a redirect to the login form), in ``serve`` and in a user's app
    alike. :func:`route_class` binds the site."""

    site: ClassVar[Site]

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()
        site = self.site

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except Refused as refused:
                return site.refusal(request, refused)
            except errors.SimpleWorkflowError as exc:
                return site.failure(request, exc)

        return guarded


def route_class(site: Site) -> type[PageRoute]:
    return type("PageRoute", (PageRoute,), {"site": site})


def _path_maker(request: Request) -> Callable[..., str]:
    """``path(name, **params)``: the path of a route, where the dashboard is mounted
    (``request.url_for`` knows the mount's root path and any prefix it was included under)."""

    def path(route: str, /, **params: Any) -> str:
        return str(request.url_for(route, **params).path)

    return path


def static_file(name: str) -> bytes | None:
    """A file of the ``static`` folder, or ``None`` if there is none by that name."""
    if "/" in name or "\\" in name or name.startswith("."):
        return None
    found = resources.files("simpleworkflow.dashboard").joinpath("static", name)
    return found.read_bytes() if found.is_file() else None
