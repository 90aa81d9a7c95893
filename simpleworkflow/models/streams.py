"""What a reader of a run's streams gets: an item, a page of items, a stream's summary."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from simpleworkflow.models.values import to_dict


@dataclass(frozen=True, slots=True)
class StreamItem:
    """One item of a run's stream: its offset (0, 1, 2 ... in the order written), the
    JSON value appended, and when it was stored (the database's clock)."""

    offset: int
    value: Any
    created_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


@dataclass(frozen=True, slots=True)
class StreamPage:
    """The items after an offset, up to a page's size; ``ended``: no item will follow
    them (the stream was closed, or the run has ended and nothing is left to read)."""

    items: list[StreamItem]
    ended: bool


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """One of a run's streams: its key, how many items it holds, whether it was closed."""

    key: str
    items: int
    closed: bool
    updated_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)
