"""Streams of a run: append items (fenced by the lease), read a page, list a run's streams."""

from __future__ import annotations

import json
from dataclasses import dataclass

from simpleworkflow.backends.core import StoreCore, read_int
from simpleworkflow.backends.ops import ATOMIC, Op
from simpleworkflow.models import TERMINAL_STATUSES
from simpleworkflow.models.streams import StreamInfo, StreamItem, StreamPage

#: One item to append: its seq among its origin's items of the stream, its value as
#: JSON text (``None`` for a close marker), and whether it closes the stream.
Append = tuple[int, str | None, bool]

_TERMINAL = frozenset(str(status) for status in TERMINAL_STATUSES)


@dataclass(frozen=True, slots=True)
class Appended:
    """What an append wrote: whether the lease held (nothing is written when it did not),
    how many items were new (those the origin had written already are left out), and
    the offsets of the first and last of them (``None`` when none was)."""

    held: bool
    items: int = 0
    first: int | None = None
    last: int | None = None


class StreamOps(StoreCore):
    def append_stream(
        self, run_id: str, token: str, key: str, origin: str, items: list[Append]
    ) -> Op[Appended]:
        """Append ``items`` to stream ``key`` of the run, after its last item; items that
        ``origin`` already wrote (same seq) are left out."""
        if not self.dialect.chained_writes:
            yield ATOMIC  # the lease checked, then the rows inserted, in one transaction
        rows_of_items = [{"seq": s, "value": v, "closed": c} for s, v, c in items]
        params = {
            "run_id": run_id,
            "token": token,
            "key": key,
            "origin": origin,
            "items": json.dumps(rows_of_items),
        }
        rows = yield self.stmt("append_stream", **params)
        if not (rows and rows[0]["held"]):
            return Appended(False)
        if self.dialect.chained_writes:  # one statement did it all
            row = rows[0]
            first, last = row["first_offset"], row["last_offset"]
            if first is None or last is None:
                return Appended(True)
            return Appended(True, read_int(row["saved"]), read_int(first), read_int(last))
        written = yield self.stmt("append_stream_then_insert", **params)  # its rows, not then()
        offsets = [read_int(r["position"]) for r in written]
        if not offsets:
            return Appended(True)
        return Appended(True, len(offsets), min(offsets), max(offsets))

    def read_stream(self, run_id: str, key: str, after: int, limit: int) -> Op[StreamPage | None]:
        """Up to ``limit`` items of stream ``key`` after offset ``after``; ``None`` when the
        run does not exist."""
        rows = yield self.stmt("read_stream", run_id=run_id, key=key, after=after, limit=limit)
        if not rows or rows[0]["run_status"] is None:
            return None
        items: list[StreamItem] = []
        closed = False
        for row in rows:
            if row["position"] is None:
                continue  # the run's row alone: no item after ``after``
            if row["closed"]:
                closed = True
                break
            items.append(
                StreamItem(
                    offset=read_int(row["position"]),
                    value=self.read_json(row["value"]),
                    created_at=self.read_time(row["created_at"]),
                )
            )
        # An item is written only while the run is leased: once it has ended (its status
        # read in the same statement), the items read are the last ones.
        finished = str(rows[0]["run_status"]) in _TERMINAL and len(rows) < limit
        return StreamPage(items, closed or finished)

    def list_streams(self, run_id: str) -> Op[list[StreamInfo]]:
        rows = yield self.stmt("list_streams", run_id=run_id)
        return [
            StreamInfo(
                key=row["stream_key"],
                items=read_int(row["items"] or 0),
                closed=bool(row["closed"]),
                updated_at=self.read_time(row["updated_at"]),
            )
            for row in rows
        ]
