"""The optional payload index: what a store may do with it, and why SQLite has none
(what it says of it, :class:`~simpleworkflow.models.PayloadIndex`, is a public record).

``payload_contains`` listings (``payload @>``) are served on Postgres by a GIN index an
operator creates when their listings need it (``simpleworkflow payload-index create``):
it is not made by a migration because every run would pay for it, whether or not anyone
filters by payload (each insert, claim and completion adds the payload's entries to it;
docs/performance.md#payload-filters-and-big-backlogs).
"""

from __future__ import annotations

from typing import Literal

from simpleworkflow import errors
from simpleworkflow.models.operator import PAYLOAD_INDEX_NAME as NAME
from simpleworkflow.models.operator import PayloadIndex

__all__ = ["NAME", "Action", "PayloadIndex", "unsupported"]

Action = Literal["create", "drop", "status"]


def unsupported(store: str) -> errors.ConfigurationError:
    """What asking a store without the index for it means, and what to do instead."""
    return errors.ConfigurationError(
        f"the payload index is a Postgres index; the {store} store has no such index: "
        "payload_contains filters there match each run a listing reads, in Python. "
        "Nothing to create or drop; to serve payload filters from an index, use a "
        "Postgres store"
    )
