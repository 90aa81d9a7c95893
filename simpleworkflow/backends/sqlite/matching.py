"""JSON containment with the meaning of Postgres ``jsonb @>``, for stores that lack it.

``contains(doc, pattern)`` is true when ``pattern`` is a part of ``doc``: objects match
when every key of the pattern is present with a contained value; arrays when every
element of the pattern is contained in some element of the document (order and
duplicates do not matter); scalars when equal. As in Postgres, an array at the top level
also contains a bare scalar that is one of its elements.
"""

from __future__ import annotations

import json
from typing import Any


def contains(doc: Any, pattern: Any, *, top: bool = True) -> bool:
    if isinstance(pattern, dict):
        return isinstance(doc, dict) and all(
            key in doc and contains(doc[key], value, top=False) for key, value in pattern.items()
        )
    if isinstance(pattern, list):
        return isinstance(doc, list) and all(
            any(contains(item, wanted, top=False) for item in doc) for wanted in pattern
        )
    if isinstance(doc, list) and top:
        return any(_same_scalar(item, pattern) for item in doc)
    return _same_scalar(doc, pattern)


def _same_scalar(a: Any, b: Any) -> bool:
    if isinstance(a, dict | list) or isinstance(b, dict | list):
        return False
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b) and (a is None) == (b is None)


def contains_json(doc: str | None, pattern: str | None) -> int:
    """``contains`` over JSON texts, as a SQLite function (1 or 0; NULL counts as no match)."""
    if doc is None or pattern is None:
        return 0
    return int(contains(json.loads(doc), json.loads(pattern)))
