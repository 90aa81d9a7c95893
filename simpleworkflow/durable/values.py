"""Values a run publishes: ``ctx.set_value(key, value)`` stores a named value that clients
read (and wait for) while the run goes on, such as an order's "payment confirmed".

A set is a journal entry (kind ``value``) written with the value's row and its audit
event (``value_set``) in one transaction fenced by the lease: a replay finds the entry and
publishes nothing again, and an attempt that lost its lease publishes nothing at all.
"""

from __future__ import annotations

import json
import time

from simpleworkflow import errors, observe
from simpleworkflow.durable.attempt import AttemptState
from simpleworkflow.durable.kinds import JournalKind
from simpleworkflow.models import JournalEntry


async def set_value(state: AttemptState, unique: str, key: str, text: str) -> None:
    """Publish ``text`` (JSON) as the run's value ``key``, journaled as step ``unique``."""
    durable = state.durable
    entry = await durable.begin(unique, JournalKind.VALUE, state.is_cancelled())
    if entry is not None:
        return  # journaled: an earlier attempt published it
    output = durable.encode(unique, {"key": key})
    logged = {"type": "value_set", "data": {"key": key, "value": json.loads(text), "step": unique}}
    record = durable.entry(unique, JournalKind.VALUE, output, events=[logged])
    if durable.fenced:
        raise errors.LeaseLost(unique)
    backend = durable.backend
    began = time.monotonic()
    got = await durable.once(
        unique, lambda: backend.execute_async(backend.set_value(record, key, text))
    )
    if not isinstance(got, JournalEntry):  # else committed before the connection broke
        if not got:
            raise errors.LeaseLost(unique)
        durable.holding.held_since(began)
        durable.remember(record)
    if state.observers:
        state.observers.value_set(observe.ValueSet(state.run, key, unique, durable.db_now()))
