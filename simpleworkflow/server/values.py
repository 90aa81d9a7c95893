"""``/runs/{run_id}/values``: the values a run publishes (``ctx.set_value``), read or waited
for over HTTP (see docs/api.md, "Values a run publishes")."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, Field
from starlette.responses import Response

from simpleworkflow import errors
from simpleworkflow.models import RunValue
from simpleworkflow.server import bodies
from simpleworkflow.web import routing
from simpleworkflow.web.auth import Auth
from simpleworkflow.web.problems import responses
from simpleworkflow.web.source import ClientSource

#: The longest one request may wait for a value.
MAX_WAIT_SECONDS = 300.0

RunId = Annotated[str, Path(description="the run's id (a UUID)", max_length=100)]
Key = Annotated[str, Path(description="the value's key, e.g. status", max_length=100)]


class RunValueOut(BaseModel):
    """The last value a run set for a key; ``version`` counts the key's sets."""

    run_id: str
    key: str
    value: Any
    version: int = Field(description="1 for the first set of the key, then 2, 3 ...")
    step_name: str = Field(description="the journal entry of the set that wrote it")
    updated_at: datetime


def router(source: ClientSource, auth: Auth, route_class: type[routing.GuardedRoute]) -> APIRouter:
    """Reads through the client, as ``client.values`` and ``client.wait_value``."""
    api = APIRouter(prefix="/runs", tags=["values"], route_class=route_class)
    reader = [auth.reader()]

    @api.get(
        "/{run_id}/values",
        response_model=list[RunValueOut],
        dependencies=reader,
        responses=responses(401, 404, 422, 503),
    )
    async def run_values(run_id: RunId) -> Response:
        """The values the run has published, the last of each key, by key."""
        found = await source.client.values(run_id)
        return bodies.respond([value.to_dict() for value in found])

    @api.get(
        "/{run_id}/values/{key}",
        response_model=RunValueOut,
        dependencies=reader,
        responses=responses(401, 404, 409, 422, 503),
    )
    async def run_value(
        run_id: RunId,
        key: Key,
        wait: Annotated[
            float,
            Query(
                ge=0,
                le=MAX_WAIT_SECONDS,
                description="seconds to wait for the key to be set (or, with after, set "
                "again); 0, the default, answers at once",
            ),
        ] = 0,
        after: Annotated[
            int | None,
            Query(ge=0, description="only a version newer than this one answers"),
        ] = None,
    ) -> Response:
        """The run's value ``key``; 404 ``value-not-set`` when there is none (newer than
        ``after``), also once ``wait`` seconds have passed without one; while waiting, 409
        ``run-finished`` as soon as the run has ended without one."""
        client = source.client
        got: RunValue | None
        if wait > 0:
            try:
                got = await client.wait_value(run_id, key, wait, after=after)
            except errors.WaitTimeout as exc:
                raise errors.ValueNotSet(str(exc)) from None
        else:
            got = await client.value(run_id, key)
            if got is not None and after is not None and got.version <= after:
                got = None
        if got is None:
            since = "" if after is None else f" newer than version {after}"
            raise errors.ValueNotSet(f"run {run_id} has set no value {key!r}{since}")
        return bodies.respond(got.to_dict())

    return api
