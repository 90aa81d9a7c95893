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
from simpleworkflow.models import WAITING_STATES, Run, RunPage, RunStatus, Unreadable

MAX_PAGE = 1000
#: A cursor this code writes is about 120 characters; anything much longer is not one,
#: and is refused before it is decoded (a deeply nested JSON text would exhaust the
#: parser's recursion).
MAX_CURSOR_CHARS = 256
#: Bounds of a ``payload_contains`` filter, the same on both stores: every value counted
#: (each scalar, array and object), how deeply arrays and objects nest, and its JSON text.
#: They keep a listing's cost to a few lookups per stored payload (SQLite matches in
#: Python, under the store's lock) and leave room for any filter a person writes.
MAX_FILTER_VALUES = 256
MAX_FILTER_DEPTH = 16
MAX_FILTER_BYTES = 64 * 1024


def list_query(
    type_prefix: str | None,
    status: str | Iterable[str] | None,
    created_after: datetime | None,
    created_before: datetime | None,
    include_deleted: bool,
    limit: int,
    cursor: str | None,
    payload_contains: Any = None,
    codec: payloads.Encoding | None = None,
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
        payload_contains=None if payload_contains is None else _filter(payload_contains, codec),
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
    created_at: Any = run.created_at
    if isinstance(created_at, Unreadable):
        # Its raw text, which the store compares as it stores it (written by hand).
        key: list[Any] = [created_at.raw, run.id, "raw"]
    else:
        key = [created_at.isoformat(), run.id]
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[Any, str]:
    """The cursor's ``created_at`` (a time, or the raw text of one that cannot be read)
    and run id."""
    try:
        if not isinstance(cursor, str) or len(cursor) > MAX_CURSOR_CHARS:
            raise ValueError("not a cursor")
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, run_id, *stored = json.loads(raw)
        if not isinstance(created_at, str) or stored not in ([], ["raw"]):
            raise TypeError("not a cursor")
        if stored == ["raw"]:
            return created_at, names.normalize_run_id(run_id)
        moment = durations.parse_time(created_at, what="the cursor's time")
        return moment, names.normalize_run_id(run_id)
    except (ValueError, TypeError, RecursionError, binascii.Error, errors.RunNotFound):
        raise errors.InvalidArgument(
            f"invalid cursor {cursor!r:.60}: pass the next_cursor of a previous page unchanged"
        ) from None


def _filter(pattern: Any, codec: payloads.Encoding | None = None) -> str:
    """``payload_contains`` as JSON text (the client's codec's: a datetime as the text
    its payloads hold), refused past the bounds above
    (:class:`~simpleworkflow.errors.InvalidArgument`, naming the one exceeded)."""
    try:
        text = payloads.encode(
            pattern, what="payload_contains", max_bytes=MAX_FILTER_BYTES, codec=codec
        )
    except errors.PayloadTooLarge:
        raise errors.InvalidArgument(
            f"payload_contains is more than {MAX_FILTER_BYTES} bytes of JSON, the limit"
        ) from None
    try:
        values, depth = _shape(json.loads(text))
    except RecursionError:
        values, depth = 0, MAX_FILTER_DEPTH + 1
    if values > MAX_FILTER_VALUES:
        raise errors.InvalidArgument(
            f"payload_contains holds {values} values (each scalar, array and object counts); "
            f"the limit is {MAX_FILTER_VALUES}: filter on fewer fields or elements"
        )
    if depth > MAX_FILTER_DEPTH:
        raise errors.InvalidArgument(
            f"payload_contains nests arrays and objects more than {MAX_FILTER_DEPTH} deep, "
            "the limit"
        )
    return text


def _shape(value: Any) -> tuple[int, int]:
    """How many values a JSON document holds and how deeply it nests (a scalar: 1, 0),
    walked without recursion."""
    values, deepest = 0, 0
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        values += 1
        if isinstance(node, dict | list):
            depth += 1
            deepest = max(deepest, depth)
            stack.extend(
                (item, depth) for item in (node.values() if isinstance(node, dict) else node)
            )
    return values, deepest
