"""The API's routes guard themselves, so that they behave the same in ``simpleworkflow
serve`` and inside a user's app (whose exception handlers are not ours):

- a request that changes state is refused when a browser says it came from another site
  (403, :func:`~simpleworkflow.web.origins.cross_site`), then authenticated, then its
  body must be JSON by its ``Content-Type`` (415 otherwise: no other site's form can send
  that without the browser asking first), all before a byte of the body is read;
- a body is read up to a limit (413 past it, before it is parsed);
- JSON is parsed strictly: ``NaN`` and ``Infinity`` are not JSON, and a document nested
  too deeply for the parser is refused, with a 400 that says so (FastAPI would say only
  "There was an error parsing the body", or fail);
- the engine's errors and failed validations become problem documents, and any other
  error a 500 problem whose id the server logs with the traceback.

The dashboard's forms parse what they carry as JSON with the same :func:`parse_json`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, ClassVar, NoReturn

from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from simpleworkflow import errors
from simpleworkflow.web import origins, problems
from simpleworkflow.web.auth import Auth

#: A request body's default limit: room for a batch of runs with large payloads. Each
#: payload is held to the client's ``max_payload_bytes`` (1 MiB) besides.
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class GuardedRoute(APIRoute):
    """An ``APIRoute`` that checks its caller, limits and parses its body itself and
    answers in problems; :func:`route_class` sets the tokens and the limit."""

    max_body_bytes: ClassVar[int] = DEFAULT_MAX_BODY_BYTES
    auth: ClassVar[Auth] = Auth()

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()
        limit, auth = self.max_body_bytes, self.auth

        async def guarded(request: Request) -> Response:
            try:
                if request.method not in origins.SAFE_METHODS:
                    check_writer(request.method, request.headers, auth)
                if request.method in ("POST", "PUT", "PATCH"):
                    await _read_json(request, limit)
                return await handler(request)
            except Exception as exc:
                return answer(exc, f"{request.method} {request.url.path}")

        return guarded


def answer(exc: Exception, where: str) -> Response:
    """The problem a route answers for ``exc`` (``where``: its method and path, logged
    with an unexpected error); a body past the limit is re-raised, for the app's guard."""
    if isinstance(exc, errors.SimpleWorkflowError):
        return problems.of_error(exc)
    if isinstance(exc, problems.ApiProblem):
        return problems.problem_response(
            exc.status, exc.name, exc.detail, headers=exc.headers, **exc.extensions
        )
    if isinstance(exc, RequestValidationError):
        return problems.of_validation(exc)
    if isinstance(exc, HTTPException):
        return problems.of_http(exc)
    if isinstance(exc, problems.BodyTooLarge):
        raise exc  # the app's guard answers it
    return problems.unexpected(exc, where)


def route_class(max_body_bytes: int, auth: Auth | None = None) -> type[GuardedRoute]:
    """A :class:`GuardedRoute` whose bodies may hold up to ``max_body_bytes``, whose
    writes ``auth`` checks before their body is read."""
    if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int):
        raise TypeError(f"max_body_bytes must be an int, not {max_body_bytes!r}")
    attributes = {"max_body_bytes": max_body_bytes, "auth": auth or Auth()}
    return type("GuardedRoute", (GuardedRoute,), attributes)


def check_writer(method: str, headers: Mapping[str, str], auth: Auth) -> None:
    """Refuse a write from another site, without the full token, or whose body a form
    could have sent; before its body is read. ``headers``: lower-cased names."""
    reason = origins.cross_site(method, headers)
    if reason is not None:
        raise problems.ApiProblem(403, "cross-site", f"refused: {reason}")
    auth.authorize(headers.get("authorization"), write=True)
    media = headers.get("content-type", "").split(";")[0].strip().lower()
    has_body = headers.get("content-length", "0") != "0" or "transfer-encoding" in headers
    if has_body and not is_json(media):
        raise problems.ApiProblem(
            415,
            "unsupported-media-type",
            f"a request body must be JSON, sent with `Content-Type: application/json`, "
            f"not {media or 'no content type'!r}",
        )


def is_json(media: str) -> bool:
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


async def _read_json(request: Request, limit: int) -> None:
    """Read the body (up to ``limit`` bytes) and, if it is JSON, parse it, leaving both
    where Starlette's ``Request.body()`` and ``.json()`` find them."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        _too_large(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            _too_large(limit)
        chunks.append(chunk)
    body = b"".join(chunks)
    request._body = body  # Starlette's cache of the body: what .body() returns
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if body and is_json(media):
        request._json = parse_json(body)  # and of the parsed document: what .json() returns


def parse_json(body: bytes | str, what: str = "the request body") -> Any:
    """JSON text as Python values, or a 400 problem that says what is wrong with it."""
    try:
        return _DECODER.decode(_text(body))
    except _NotJSON as exc:
        raise problems.ApiProblem(
            400, "invalid-json", f"{what} holds {exc}, which JSON cannot hold; use null or a string"
        ) from None
    except json.JSONDecodeError as exc:
        raise problems.ApiProblem(
            400,
            "invalid-json",
            f"{what} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
        ) from None
    except RecursionError:
        raise problems.ApiProblem(
            400, "invalid-json", f"{what} is nested too deeply to be read"
        ) from None
    except ValueError as exc:  # not UTF-8, or an integer of more digits than Python reads
        raise problems.ApiProblem(400, "invalid-json", f"{what} is not JSON: {exc}") from None


class _NotJSON(ValueError):
    pass


def _no_constant(name: str) -> NoReturn:
    raise _NotJSON(name)


#: Made once: ``json.loads(..., parse_constant=...)`` builds a decoder per call.
_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def _text(body: bytes | str) -> str:
    """The JSON text of ``body``, as ``json.loads`` reads it (UTF-8, -16 or -32 bytes)."""
    if isinstance(body, str):
        if body.startswith("\ufeff"):
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", body, 0)
        return body
    return body.decode(json.detect_encoding(body), "surrogatepass")


def _too_large(limit: int) -> NoReturn:
    raise problems.ApiProblem(
        413,
        "body-too-large",
        f"the request body is larger than {limit} bytes, the limit of this server "
        "(`simpleworkflow serve --max-body-bytes`); send fewer runs per request",
    )
