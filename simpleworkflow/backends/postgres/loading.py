"""Times and intervals Python cannot hold, loaded as :class:`~simpleworkflow.models.Unreadable`.

Postgres stores times from 4713 BC to 294276 AD; Python's ``datetime`` holds years 1 to
9999. A row written by plain SQL or another runtime with a time outside that range (or
an interval past ``timedelta``'s) made psycopg raise while loading the whole result, so
one row failed a claim of many runs and the worker with it. Loaded through these
loaders, such a value becomes a marker that names its raw text: the row reads, and the
caller decides (a listing shows it, a worker fails that run alone).

Each loader wraps psycopg's own (its C implementation where installed), so a healthy
value costs one Python call more and no extra statement.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.adapt import Loader
from psycopg.pq import Format

from simpleworkflow.models import Unreadable

#: The types whose values may lie out of Python's range.
TYPES = ("timestamptz", "timestamp", "date", "interval")


def _guarded(name: str, format: Format) -> type[Loader]:
    oid = psycopg.adapters.types[name].oid
    found = psycopg.adapters.get_loader(oid, format)
    assert found is not None
    inner_class: Any = found

    class Guarded(Loader):
        def __init__(self, oid: int, context: Any = None) -> None:
            super().__init__(oid, context)
            self._inner = inner_class(oid, context)

        def load(self, data: Any) -> Any:
            try:
                return self._inner.load(data)
            except (psycopg.DataError, ValueError, OverflowError) as exc:
                raw = bytes(data).decode(errors="replace") if format == Format.TEXT else "?"
                return Unreadable(raw, f"{name} out of Python's range: {exc}")

    Guarded.format = format
    Guarded.__name__ = Guarded.__qualname__ = f"Guarded{inner_class.__name__}"
    return Guarded


_LOADERS = [(name, _guarded(name, f)) for name in TYPES for f in (Format.TEXT, Format.BINARY)]


def guard(target: Any) -> None:
    """Register the guarded loaders on a connection or a cursor (its adapters only)."""
    for name, loader in _LOADERS:
        target.adapters.register_loader(name, loader)
