"""A short way through the app for ``POST /api/v1/runs``, the request a producer sends
most: the same checks and the same answer as the route, at a fraction of its cost.

FastAPI's path to a route (its nested routers matched twice, the dependencies solved,
the request object, its middleware) costs a start over HTTP more CPU than the start
itself. This ASGI middleware, behind :mod:`~simpleworkflow.web.guard` (which has
checked the host, the site and the body's size by then), takes a start whose caller may
write (:func:`~simpleworkflow.web.routing.check_writer`: the token, a JSON content
type) and whose body is JSON that :class:`~simpleworkflow.server.schemas.StartRun`
accepts, and starts it as the route does (:func:`~simpleworkflow.server.runs.start_one`).
Any other request goes on to the app, the body already read handed on with it, so that
every refusal is the route's own: one place decides what is refused and how it is said.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from simpleworkflow.server import runs
from simpleworkflow.server.schemas import StartRun
from simpleworkflow.web import guard, problems, routing
from simpleworkflow.web.auth import Auth
from simpleworkflow.web.source import ClientSource


class StartLane:
    """ASGI middleware answering ``POST {path}`` for the requests it may take."""

    def __init__(self, app: ASGIApp, *, path: str, source: ClientSource, auth: Auth) -> None:
        self.app = app
        self.path = path
        self.source = source
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or guard.route_path(scope) != self.path
            or not self._may_write(guard.request_headers(scope))
        ):
            await self.app(scope, receive, send)
            return
        body = await _body(receive)
        if body is None:
            return  # the client went away before it had sent its body
        request = _start_request(body)
        if request is None:
            await self.app(scope, _replay(body, receive), send)
            return
        run_type, payload, model = request
        try:
            options = {} if model is None else model.options()
            response = await runs.start_one(self.source, run_type, payload, options)
        except Exception as exc:
            response = routing.answer(exc, f"POST {scope.get('path', '')}")
        await response(scope, receive, send)

    def _may_write(self, headers: Mapping[str, str]) -> bool:
        """Whether a body is announced and the route's checks of the caller pass (the
        site, the token, a JSON content type)."""
        if headers.get("content-length", "0") == "0" and "transfer-encoding" not in headers:
            return False  # the route says what a missing body is
        try:
            routing.check_writer("POST", headers, self.auth)
        except problems.ApiProblem:
            return False
        return True


async def _body(receive: Receive) -> bytes | None:
    """The whole body (the guard's ``receive`` refuses one past the limit), or ``None``
    once the client has disconnected."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _start_request(body: bytes) -> tuple[str, Any, StartRun | None] | None:
    """The start the body asks for (its type, its payload, and the model that holds its
    options, if any), or ``None`` for a body the route must refuse. A body of only a type
    (a string) and a payload, what most starts send, is read as :class:`StartRun` would
    read it, without building one."""
    try:
        document: Any = routing.parse_json(body)
    except problems.ApiProblem:
        return None
    if type(document) is dict and type(document.get("type")) is str and document.keys() <= _PLAIN:
        return document["type"], document.get("payload"), None
    try:
        request = StartRun.model_validate(document)
    except ValidationError:
        return None
    return request.type, request.payload, request


#: The keys of a start with no options.
_PLAIN = frozenset({"type", "payload"})


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the body read already, then whatever comes next."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed
