"""JSON containment with the meaning of Postgres ``jsonb @>``, for stores that lack it.

``contains(doc, pattern)`` is true when ``pattern`` is a part of ``doc``: objects match
when every key of the pattern is present with a contained value; arrays when every
element of the pattern is contained in some element of the document (order and
duplicates do not matter); scalars when equal. As in Postgres, an array at the top level
also contains a bare scalar that is one of its elements.

The work must not grow with the pattern's size times the document's: SQLite runs this
in Python for every row a listing reads, under the store's lock. So an array of the
document is indexed once (:class:`_Elements`) and each element the pattern asks of it is
a lookup: a scalar by its canonical key, an object by one of its scalar members, an array
by one of its scalar elements. Only the elements that hold that member (or key, or
element) are then compared in full.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from typing import Any

#: A scalar as a key that is equal for values ``jsonb`` holds equal: ``1`` and ``1.0``
#: alike (Python compares and hashes numbers exactly), ``true`` never equal to ``1``.
Key = tuple[str, Any]


def contains(doc: Any, pattern: Any, *, top: bool = True) -> bool:
    if isinstance(pattern, dict):
        return isinstance(doc, dict) and all(
            key in doc and contains(doc[key], value, top=False) for key, value in pattern.items()
        )
    if isinstance(pattern, list):
        if not isinstance(doc, list):
            return False
        elements = _Elements(doc)
        return all(elements.hold(wanted) for wanted in pattern)
    if isinstance(doc, list) and top:
        return _Elements(doc).has_scalar(pattern)
    return not isinstance(doc, dict | list) and _key(doc) == _key(pattern)


class _Elements:
    """One array of the document, indexed for the elements a pattern asks of it; each
    part is built when first needed, in one pass over the array."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items
        self._scalars: dict[str, set[Any]] = {}
        self._objects: list[dict[str, Any]] | None = None
        self._arrays: list[list[Any]] | None = None
        self._by_member: dict[str, dict[Key, list[dict[str, Any]]]] = {}
        self._by_key: dict[str, list[dict[str, Any]]] | None = None
        self._by_element: dict[Key, list[list[Any]]] | None = None

    def hold(self, wanted: Any) -> bool:
        """Some element contains ``wanted``."""
        if isinstance(wanted, dict):
            candidates: list[Any] = self._objects_for(wanted)
        elif isinstance(wanted, list):
            candidates = self._arrays_for(wanted)
        else:
            return self.has_scalar(wanted)
        return any(contains(item, wanted, top=False) for item in candidates)

    def has_scalar(self, wanted: Any) -> bool:
        kind = _key(wanted)[0]
        found = self._scalars.get(kind)
        if found is None:
            found = self._scalars[kind] = {x for x in self.items if _kind(x) == kind}
        return wanted in found

    @property
    def objects(self) -> list[dict[str, Any]]:
        if self._objects is None:
            self._objects = [x for x in self.items if type(x) is dict]
        return self._objects

    @property
    def arrays(self) -> list[list[Any]]:
        if self._arrays is None:
            self._arrays = [x for x in self.items if type(x) is list]
        return self._arrays

    def _objects_for(self, wanted: dict[str, Any]) -> list[dict[str, Any]]:
        """The objects that may contain ``wanted``: those holding one of its scalar
        members (the rarest), else one of its keys."""
        if not wanted:
            return self.objects[:1]
        members = [(k, _key(v)) for k, v in wanted.items() if not isinstance(v, dict | list)]
        if members:
            return min((self._with_member(k).get(v, []) for k, v in members), key=len)
        if self._by_key is None:
            self._by_key = defaultdict(list)
            for item in self.objects:
                for k in item:
                    self._by_key[k].append(item)
        return min((self._by_key.get(k, []) for k in wanted), key=len)

    def _with_member(self, name: str) -> dict[Key, list[dict[str, Any]]]:
        """The objects by their scalar value of member ``name`` (indexed when first asked)."""
        found = self._by_member.get(name)
        if found is None:
            found = self._by_member[name] = defaultdict(list)
            for item in self.objects:
                value = item.get(name, self)  # self: a marker for "no such member"
                if value is not self and not isinstance(value, dict | list):
                    found[_key(value)].append(item)
        return found

    def _arrays_for(self, wanted: list[Any]) -> list[list[Any]]:
        """The arrays that may contain ``wanted``: those holding one of its scalar
        elements (the rarest), else every array."""
        scalars = [_key(v) for v in wanted if not isinstance(v, dict | list)]
        if not scalars:
            return self.arrays[:1] if not wanted else self.arrays
        if self._by_element is None:
            self._by_element = defaultdict(list)
            for item in self.arrays:
                for key in {_key(v) for v in item if not isinstance(v, dict | list)}:
                    self._by_element[key].append(item)
        return min((self._by_element.get(k, []) for k in scalars), key=len)


def _kind(value: Any) -> str:
    """What kind of JSON value ``json.loads`` made: its exact type says."""
    kind = type(value)
    if kind is str:
        return "string"
    if kind is int or kind is float:
        return "number"
    if kind is dict or kind is list:
        return "container"
    return "literal"  # true, false, null


def _key(value: Any) -> Key:
    return (_kind(value), value)


@functools.lru_cache(maxsize=16)
def _pattern(text: str) -> Any:
    """A pattern parsed once per statement, not once per row (it is never changed)."""
    return json.loads(text)


def contains_json(doc: str | None, pattern: str | None) -> int:
    """``contains`` over JSON texts, as a SQLite function (1 or 0; NULL counts as no match)."""
    if doc is None or pattern is None:
        return 0
    return int(contains(json.loads(doc), _pattern(pattern)))
