"""Errors as RFC 9457 problem details: each of the engine's errors, a request that failed
validation and the API's own refusals become one ``application/problem+json`` body with
the status that fits and a ``type`` that names the problem.

The mapping is a table (:data:`STATUSES`), most specific class first: a new error of the
tree gets its status by where it sits until it is named here.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from simpleworkflow import errors

MEDIA_TYPE = "application/problem+json"
#: What a client is told when the database fails: the cause (a SQLite file's path, a
#: Postgres host, the driver's words) is for the server's log, not for whoever asked.
STORE_UNAVAILABLE = "the database is unavailable or busy; retry shortly (the server's log says why)"

_log = logging.getLogger("simpleworkflow.server")

#: ``(error class, status, problem name)``, the first class that matches wins.
STATUSES: Sequence[tuple[type[Exception], int, str]] = (
    (errors.TypeNotRegistered, 404, "type-not-registered"),
    (errors.RunNotFound, 404, "run-not-found"),
    (errors.ValueNotSet, 404, "value-not-set"),
    (errors.ScheduleNotFound, 404, "schedule-not-found"),
    (errors.PayloadTooLarge, 413, "payload-too-large"),
    (errors.IdempotencyConflict, 409, "idempotency-conflict"),
    (errors.RunFinished, 409, "run-finished"),
    (errors.RunNotRetryable, 409, "run-not-retryable"),
    (errors.StepNotFound, 404, "step-not-found"),
    (errors.ForkRefused, 409, "fork-refused"),
    (errors.InvalidTypeName, 422, "invalid-type-name"),
    (errors.InvalidPayload, 422, "invalid-payload"),
    (errors.InvalidInput, 422, "invalid-argument"),
    (errors.SchemaError, 503, "schema-not-current"),
    (errors.StoreUnavailable, 503, "store-unavailable"),
)


#: What an engine error knows, as the problem's extension members: ``type`` and
#: ``status`` are RFC 9457's own, so the workflow type and the run's status are renamed.
_EXTENSIONS = {
    "run_id": "run_id",
    "run_type": "run_type",
    "type": "workflow_type",
    "status": "run_status",
}


class Problem(BaseModel):
    """An error, as RFC 9457 problem details (``application/problem+json``)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="names the problem, e.g. urn:simpleworkflow:run-not-found")
    title: str
    status: int
    detail: str = Field(description="what was wrong, and what to do about it")
    errors: list[dict[str, Any]] | None = Field(
        default=None, description="for a request that failed validation: each error found"
    )


class ApiProblem(Exception):
    """A refusal of the API itself (a body too large, a bad token ...), as a problem."""

    def __init__(
        self,
        status: int,
        name: str,
        detail: str,
        *,
        headers: Mapping[str, str] | None = None,
        **extensions: Any,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.name = name
        self.detail = detail
        self.headers = dict(headers or {})
        self.extensions = extensions


class BodyTooLarge(Exception):
    """Raised from an app's ``receive`` once a body passes its limit
    (:mod:`~simpleworkflow.web.guard` answers 413); no route should answer it."""


def problem_response(
    status: int,
    name: str,
    detail: str,
    *,
    headers: Mapping[str, str] | None = None,
    **extensions: Any,
) -> JSONResponse:
    body = {
        "type": f"urn:simpleworkflow:{name}",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        **extensions,
    }
    return JSONResponse(
        jsonable_encoder(body), status_code=status, media_type=MEDIA_TYPE, headers=headers
    )


def of_error(exc: errors.SimpleWorkflowError) -> JSONResponse:
    """The problem an engine error stands for; ``500`` for one no request should cause."""
    for cls, status, name in STATUSES:
        if isinstance(exc, cls):
            extensions = {
                name: getattr(exc, attribute)
                for attribute, name in _EXTENSIONS.items()
                if isinstance(getattr(exc, attribute, None), str)
            }
            headers = {"Retry-After": "5"} if status == 503 else None
            return problem_response(status, name, detail(exc), headers=headers, **extensions)
    return unexpected(exc)


def unexpected(exc: BaseException, where: str = "") -> JSONResponse:
    """A 500 for an error no request should cause: logged with its traceback under an id
    that the answer carries, so that a report can be matched to the log."""
    return internal_error(log_unexpected(exc, where))


def log_unexpected(exc: BaseException, where: str = "") -> str:
    """Log ``exc`` with its traceback under a new id, and return the id."""
    error_id = uuid.uuid4().hex[:16]
    _log.error("unexpected error %s%s", error_id, f" on {where}" if where else "", exc_info=exc)
    return error_id


def internal_error(error_id: str) -> JSONResponse:
    return problem_response(
        500,
        "internal-error",
        f"an unexpected error; the server's log holds its details under the id {error_id}",
        error_id=error_id,
    )


def detail(exc: errors.SimpleWorkflowError) -> str:
    """What an answer may say of an engine error: its message, except for a database
    that failed, whose message (logged here) names where the database is."""
    if isinstance(exc, errors.StoreUnavailable):
        _log.warning("answered 503: %s", exc)
        return STORE_UNAVAILABLE
    return str(exc)


def of_validation(exc: RequestValidationError) -> JSONResponse:
    """A request that failed its model: 422, with each error found and where."""
    found = [
        {
            "loc": list(error.get("loc", ())),
            "msg": str(error.get("msg", "")),
            "type": str(error.get("type", "")),
        }
        for error in exc.errors()
    ]
    first = found[0] if found else {"loc": [], "msg": "invalid request"}
    where = ".".join(str(part) for part in first["loc"])
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    detail = f"{where}: {first['msg']}{more}" if where else f"{first['msg']}{more}"
    return problem_response(422, "invalid-request", detail, errors=found)


def install(app: FastAPI) -> None:
    """Answer Starlette's own errors (an unknown path, a method not allowed) with problem
    documents too, so that a client of the standalone app sees one error format. The
    API's routes convert their errors themselves (:mod:`~simpleworkflow.web.routing`),
    so that they do so in a user's app as well."""

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        return of_http(exc)

    app.add_exception_handler(HTTPException, http_error)


def of_http(exc: HTTPException) -> JSONResponse:
    phrase = HTTPStatus(exc.status_code).phrase
    detail = exc.detail if isinstance(exc.detail, str) else phrase
    name = phrase.lower().replace(" ", "-")
    return problem_response(exc.status_code, name, detail, headers=exc.headers)


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` entry of an endpoint's error statuses."""
    return {
        status: {
            "model": Problem,
            "description": _DESCRIPTIONS.get(status, HTTPStatus(status).phrase),
            "content": {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }


_DESCRIPTIONS = {
    400: "the body is not JSON (or NaN, or nested too deeply)",
    401: "no token, or a wrong one",
    403: "a read-only token, for a request that writes; or a write a browser sent from "
    "another site",
    404: "no such run or type",
    409: "the run's state or an idempotency key forbids it",
    413: "the body or a payload is larger than the limit",
    422: "a field is missing, unknown, of the wrong type or refused by the engine",
    503: "the database is unreachable or its schema is not current",
}
