"""The optional payload index: what a store says of it, and why SQLite has none.

``payload_contains`` listings (``payload @>``) are served on Postgres by a GIN index an
operator creates when their listings need it (``simpleworkflow payload-index create``):
it is not made by a migration because every run would pay for it, whether or not anyone
filters by payload (each insert, claim and completion adds the payload's entries to it;
docs/performance.md#payload-filters-and-big-backlogs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from simpleworkflow import errors

#: The index's name, in the store's schema.
NAME = "idx_workflow_run_payload"

Action = Literal["create", "drop", "status"]


@dataclass(frozen=True)
class PayloadIndex:
    """The payload index as it stands after an action.

    ``present``: the index exists; ``valid``: it serves queries (a ``create index
    concurrently`` that was interrupted leaves an invalid index behind, which costs
    writes and serves nothing); ``size_bytes``: its size on disk (0 when absent);
    ``changed``: this call created or dropped it; ``rebuilt``: this call found an invalid
    index and dropped it before building it again.
    """

    present: bool
    valid: bool
    size_bytes: int
    changed: bool = False
    rebuilt: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": NAME,
            "present": self.present,
            "valid": self.valid,
            "size_bytes": self.size_bytes,
            "changed": self.changed,
            "rebuilt": self.rebuilt,
        }


def unsupported(store: str) -> errors.ConfigurationError:
    """What asking a store without the index for it means, and what to do instead."""
    return errors.ConfigurationError(
        f"the payload index is a Postgres index; the {store} store has no such index: "
        "payload_contains filters there match each run a listing reads, in Python. "
        "Nothing to create or drop; to serve payload filters from an index, use a "
        "Postgres store"
    )
