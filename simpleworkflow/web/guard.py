"""The app-wide guard of ``simpleworkflow serve``: what every request meets before any
route, the API's and the dashboard's alike.

- a ``Host`` that is not one of the server's names is refused (421), against DNS
  rebinding (:mod:`~simpleworkflow.web.origins`);
- a request that changes state from another site is refused (403) before its body is
  read;
- a body is counted as it arrives, and refused (413) past the limit of its path: the
  API's ``max_body_bytes``, the dashboard's forms :data:`FORM_MAX_BODY_BYTES`; a declared
  ``Content-Length`` over it is refused before a byte is read;
- an error nothing else answered becomes a 500 problem (an HTML page for a browser's
  page) that carries an id, and the server logs the traceback under that id: never a
  plain-text 500.
"""

from __future__ import annotations

import html
from collections.abc import Mapping

from starlette.responses import HTMLResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from simpleworkflow.web import origins, problems
from simpleworkflow.web.origins import AllowedHosts

#: The dashboard's forms: a signal's JSON payload (at most 1 MiB) percent-encoded, with
#: room to spare; the API's bodies have their own limit.
FORM_MAX_BODY_BYTES = 4 * 1024 * 1024


class Guard:
    """ASGI middleware; ``api_prefix`` tells the API's paths (limit ``max_body_bytes``)
    from the dashboard's (:data:`FORM_MAX_BODY_BYTES`, or less)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        hosts: AllowedHosts,
        max_body_bytes: int,
        api_prefix: str | None = None,
    ) -> None:
        self.app = app
        self.hosts = hosts
        self.max_body_bytes = max_body_bytes
        self.api_prefix = api_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope[HEADERS] = headers_of(scope)
        limit = self._limit(scope)
        refusal = self._refusal(scope, headers, limit)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        body = _Counted(receive, limit)
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if body.exceeded:
                return  # the guard answers 413 instead of whatever the app made of it
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, body.receive, tracked)
        except Exception as exc:
            if body.exceeded and not started:
                await too_large(limit)(scope, receive, send)
                return
            if started:
                problems.log_unexpected(exc, _where(scope))
                raise
            await unexpected(exc, scope, headers)(scope, receive, send)
            return
        if body.exceeded and not started:
            await too_large(limit)(scope, receive, send)

    def _refusal(self, scope: Scope, headers: Mapping[str, str], limit: int) -> Response | None:
        if not self.hosts.allows(headers.get("host")):
            return problems.problem_response(
                421,
                "host-not-allowed",
                f"this server does not answer to the host {headers.get('host', '')[:200]!r}; "
                "add it with `simpleworkflow serve --allowed-host` (or "
                f"${origins.ALLOWED_HOSTS_ENV})",
            )
        reason = origins.cross_site(scope["method"], headers)
        if reason is not None:
            return problems.problem_response(403, "cross-site", f"refused: {reason}")
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            return too_large(limit)
        return None

    def _limit(self, scope: Scope) -> int:
        if self.api_prefix is not None and route_path(scope).startswith(self.api_prefix + "/"):
            return self.max_body_bytes
        return min(self.max_body_bytes, FORM_MAX_BODY_BYTES)


class _Counted:
    """A ``receive`` that counts the body's bytes and raises past ``limit``."""

    def __init__(self, receive: Receive, limit: int) -> None:
        self._receive = receive
        self._limit = limit
        self._size = 0
        self.exceeded = False

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.request":
            self._size += len(message.get("body", b""))
            if self._size > self._limit:
                self.exceeded = True
                raise problems.BodyTooLarge(f"the request body is larger than {self._limit} bytes")
        return message


def too_large(limit: int) -> Response:
    return problems.problem_response(
        413,
        "body-too-large",
        f"the request body is larger than {limit} bytes, the limit of this server for this "
        "path (`simpleworkflow serve --max-body-bytes` for the API)",
    )


def unexpected(exc: Exception, scope: Scope, headers: Mapping[str, str]) -> Response:
    """The answer to an error nothing else answered: logged, and named by its id."""
    error_id = problems.log_unexpected(exc, _where(scope))
    if "text/html" in headers.get("accept", "") and scope.get("method") == "GET":
        page = _PAGE.format(id=html.escape(error_id))
        return HTMLResponse(page, status_code=500, headers=_PAGE_HEADERS)
    return problems.internal_error(error_id)


_PAGE = (
    "<!doctype html><html><head><meta charset='utf-8'><title>Internal error</title></head>"
    "<body><h1>Something went wrong</h1><p>The server could not answer this page. Its log "
    "holds the details under the id <code>{id}</code>.</p></body></html>"
)


_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


#: Where the guard leaves the request's headers (:func:`headers_of`) in its scope, for
#: what runs behind it to read rather than decode them again.
HEADERS = "simpleworkflow.headers"


def headers_of(scope: Scope) -> dict[str, str]:
    """The request's headers by name, the first of each name as Starlette's ``Headers``
    reads them: a dict, read several times per request at a fraction of the cost."""
    return {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in reversed(scope["headers"])
    }


def request_headers(scope: Scope) -> Mapping[str, str]:
    """The headers the guard read (:data:`HEADERS`), else :func:`headers_of`."""
    headers: Mapping[str, str] | None = scope.get(HEADERS)
    return headers_of(scope) if headers is None else headers


def route_path(scope: Scope) -> str:
    """The request's path under the app's root (where it is mounted)."""
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def _where(scope: Scope) -> str:
    return f"{scope.get('method', '')} {scope.get('path', '')}"
