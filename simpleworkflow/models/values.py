"""Stored values as every output shows them: a value this library cannot read, and the
one helper every record's ``to_dict`` uses, so that a time, a duration or an unreadable
value looks the same in the CLI's ``--json``, the HTTP API and the dashboard."""

from __future__ import annotations

import dataclasses
import enum
import operator
import typing
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any


@typing.final
@dataclasses.dataclass(frozen=True, slots=True)
class Unreadable:
    """A stored value this library cannot read (a time out of Python's range, JSON text
    that does not parse), written by plain SQL or another runtime. Listings show it in
    place of the value, with its raw text; a worker fails the run it belongs to."""

    raw: str
    reason: str

    def __str__(self) -> str:
        return f"unreadable: {self.raw}"

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


def unreadable_fields(record: Any) -> dict[str, Unreadable]:
    """The fields of a record (a run, an event, a journal entry) that hold an
    :class:`Unreadable`, by name. A worker asks it of every run it claims: a healthy
    record costs one C-level read of its fields and one scan of their types."""
    kind = type(record)
    read = _READ_SLOTS.get(kind)
    if read is None:
        read = _READ_SLOTS[kind] = operator.attrgetter(*kind.__slots__)
    values = read(record)
    if type(values) is not tuple:  # a record of one field
        values = (values,)
    if Unreadable not in map(type, values):  # Unreadable is final: no subclass to miss
        return {}
    return {
        name: value
        for name, value in zip(kind.__slots__, values, strict=True)
        if isinstance(value, Unreadable)
    }


_READ_SLOTS: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


def to_dict(record: Any, keys: Iterable[str] | None = None, /, **values: Any) -> dict[str, Any]:
    """``record`` as a JSON-ready dict: each of ``keys`` in order (``None``: every field
    of the dataclass), read as the record's attribute of that name unless ``values`` gives
    it (a field shown under another name, a value worked out), then made JSON-ready."""
    out = {}
    for key in _fields(type(record)) if keys is None else keys:
        value = values[key] if key in values else getattr(record, key)
        out[key] = value if type(value) in AS_IS else json_ready(value)
    return out


def _fields(kind: Any) -> tuple[str, ...]:
    """A dataclass's field names, in order (read once per class: every output pays)."""
    names = _FIELDS.get(kind)
    if names is None:
        names = _FIELDS[kind] = tuple(f.name for f in dataclasses.fields(kind))
    return names


_FIELDS: dict[type, tuple[str, ...]] = {}


def json_ready(value: Any) -> Any:
    """A time as ISO 8601 text, a duration as seconds, an enum as its value, a stored
    value that cannot be read as ``unreadable: <raw>``, a mapping as a dict and a tuple as
    a list; anything else (JSON values: payloads, results) as it is."""
    if type(value) in AS_IS:  # most values: checked first, since every output pays
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Unreadable):
        return str(value)
    if isinstance(value, Mapping) and type(value) is not dict:
        return dict(value)
    if isinstance(value, tuple):
        return list(value)
    return value


#: The types a record's value is shown as, unchanged.
AS_IS = frozenset({str, int, float, bool, type(None), dict, list})


def shown(value: Any) -> Any:
    """A stored value as JSON output shows it: one that cannot be read as
    ``unreadable: <its raw text>``, any other as it is."""
    return str(value) if isinstance(value, Unreadable) else value


def iso(moment: datetime | Unreadable | None) -> str | None:
    """A stored time as ISO 8601 text (``None`` as ``None``); one that cannot be read as
    ``unreadable: <its raw text>``."""
    if moment is None:
        return None
    return moment.isoformat() if isinstance(moment, datetime) else str(moment)
