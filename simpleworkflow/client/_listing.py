"""Listing runs: the filters checked and turned into a query, pages and their cursors."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from simpleworkflow import durations, errors, names, payloads
from simpleworkflow.backends.records import RunQuery
from simpleworkflow.models import WAITING_STATES, Run, RunPage, RunStatus

MAX_PAGE = 1000


def list_query(
    type_prefix: str | None,
    status: str | Iterable[str] | None,
    created_after: datetime | None,
    created_before: datetime | None,
    include_deleted: bool,
    limit: int,
    cursor: str | None,
    payload_contains: Any = None,
) -> RunQuery:
    raw = [] if status is None else [status] if isinstance(status, str) else [*status]
    states = [_check_status(s) for s in raw]
    waits = tuple(WAITING_STATES[s] for s in states if s in WAITING_STATES)
    after_created_at, after_id = _decode_cursor(cursor) if cursor else (None, None)
    return RunQuery(
        type_like=None if type_prefix is None else names.like_pattern(type_prefix),
        statuses=tuple(s for s in states if s not in WAITING_STATES),
        waits=waits,
        retrying="retry" in waits,
        created_after=_time("created_after", created_after),
        created_before=_time("created_before", created_before),
        payload_contains=(
            None
            if payload_contains is None
            else payloads.encode(payload_contains, what="payload_contains")
        ),
        include_deleted=bool(include_deleted),
        limit=names.check_int("limit", limit, 1, MAX_PAGE) + 1,  # one extra tells if more exist
        after_created_at=after_created_at,
        after_id=after_id,
    )


def page(runs: list[Run], query: RunQuery) -> RunPage:
    if len(runs) < query.limit:
        return RunPage(runs=runs, next_cursor=None)
    runs = runs[: query.limit - 1]
    return RunPage(runs=runs, next_cursor=_encode_cursor(runs[-1]))


def _time(what: str, value: datetime | None) -> datetime | None:
    return None if value is None else durations.check_time(value, what=what)


def _check_status(status: object) -> str:
    """A stored status, or one of the states of a waiting run (``sleeping`` ...)."""
    if status in WAITING_STATES:
        return str(status)
    try:
        return RunStatus(str(status)).value
    except ValueError:
        known = ", ".join([*(s.value for s in RunStatus), *WAITING_STATES])
        raise errors.InvalidArgument(f"unknown status {status!r}; use one of {known}") from None


def _encode_cursor(run: Run) -> str:
    raw = json.dumps([run.created_at.isoformat(), run.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, run_id = json.loads(raw)
        moment = durations.parse_time(created_at, what="the cursor's time")
        return moment, names.normalize_run_id(run_id)
    except (ValueError, TypeError, binascii.Error, errors.RunNotFound):
        raise errors.InvalidArgument(
            f"invalid cursor {cursor!r:.60}: pass the next_cursor of a previous page unchanged"
        ) from None
