"""A run's stream as Server-Sent Events (``text/event-stream``), as the API
(``GET /api/v1/runs/{id}/streams/{key}``, bearer token) and the dashboard (its run page,
the session's cookie: a browser's ``EventSource`` cannot send a token) serve it.

One event per item, its ``id:`` the item's offset and its ``data:`` the item's JSON,
then an ``end`` event once the stream is closed or the run has ended. A client that
reconnects sends the last id it got as ``Last-Event-ID`` (``EventSource`` does it by
itself) and gets the items after it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.responses import StreamingResponse

from simpleworkflow import errors, names
from simpleworkflow.models.streams import StreamItem

#: What a reconnecting ``EventSource`` waits first, in milliseconds.
RETRY_MS = 1000


def resume(after: int | None, last_event_id: str | None) -> int | None:
    """Where to start: after ``Last-Event-ID`` when the client sent one, else ``after``."""
    if last_event_id is None or not last_event_id.strip():
        return names.check_stream_offset(after)
    try:
        return names.check_stream_offset(int(last_event_id))
    except ValueError:
        raise errors.InvalidArgument(
            f"Last-Event-ID must be an item's offset, not {last_event_id!r:.40}"
        ) from None


def response(
    items: AsyncIterator[StreamItem], allowed: Callable[[], Awaitable[bool]] | None = None
) -> StreamingResponse:
    """The items as an event stream, sent as they come (no proxy buffering, no cache).
    ``allowed``, asked before each item, ends the response without the ``end`` event
    once it says no: the client connects again, and is asked to log in."""
    return StreamingResponse(
        _events(items, allowed),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _events(
    items: AsyncIterator[StreamItem], allowed: Callable[[], Awaitable[bool]] | None = None
) -> AsyncIterator[bytes]:
    yield f"retry: {RETRY_MS}\n\n".encode()
    async for item in items:
        if allowed is not None and not await allowed():
            return
        yield _event(item.offset, item.value)
    yield b"event: end\ndata: {}\n\n"


def _event(offset: int, value: Any) -> bytes:
    data = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return f"id: {offset}\ndata: {data}\n\n".encode()
