"""Publishing an event: one run for each workflow type subscribed to its topic, started in
one transaction and keyed by the event, so that publishing it again starts nothing.

The runs' idempotency keys do the deduplicating (``topic:<topic>:<type>:<event id>``):
the unique index that makes ``start`` safe to repeat makes a publish safe to repeat,
from any number of processes at once, and a producer in another language gets the same
guarantee from the one ``insert`` of docs/topics.md, which derives the same keys. The
key names the type, not the pattern: a type subscribed through two patterns that both
match runs once per event.
"""

from __future__ import annotations

from collections.abc import Iterable

from simpleworkflow import names
from simpleworkflow.backends import Backend
from simpleworkflow.backends.ops import ATOMIC, Op
from simpleworkflow.backends.records import NewRun
from simpleworkflow.models import DEFAULT_MAX_ATTEMPTS, Published, Subscription

#: What the idempotency key of a published run starts with.
KEY_PREFIX = "topic:"


def event_key(topic: str, type: str, event_id: str) -> str:
    """The idempotency key of the run of ``type`` for an event: the event id comes last,
    since it alone may hold a ``:``."""
    return f"{KEY_PREFIX}{topic}:{type}:{event_id}"


def publish(backend: Backend, topic: str, payload: str, event_id: str) -> Op[Published]:
    """Start, in one transaction, a run of each type subscribed to ``topic``; the runs an
    earlier publish of the event started come back instead (``created`` False)."""
    yield ATOMIC  # the subscriptions read and the runs started belong together
    subscriptions = yield from backend.list_subscriptions(topic=topic)
    if not subscriptions:
        return Published(topic=topic, event_id=event_id, runs=[])
    news = [
        (
            names.new_run_id(),
            NewRun(
                type=type_name,
                payload=payload,
                idempotency_key=event_key(topic, type_name, event_id),
                priority=priority,
                max_attempts=max_attempts,
            ),
        )
        for type_name, (priority, max_attempts) in sorted(options_by_type(subscriptions).items())
    ]
    runs = yield from backend.create_runs(news)
    return Published(topic=topic, event_id=event_id, runs=runs)


def options_by_type(subscriptions: Iterable[Subscription]) -> dict[str, tuple[int, int]]:
    """``{type: (priority, max_attempts)}``: a type whose patterns match more than once
    gets the most generous options among them (the most urgent priority, the most
    attempts), as the SQL statement's ``min`` and ``max`` give."""
    found: dict[str, tuple[int, int]] = {}
    for sub in subscriptions:
        attempts = DEFAULT_MAX_ATTEMPTS if sub.max_attempts is None else sub.max_attempts
        if sub.workflow_type in found:
            priority, most = found[sub.workflow_type]
            found[sub.workflow_type] = (min(priority, sub.priority), max(most, attempts))
        else:
            found[sub.workflow_type] = (sub.priority, attempts)
    return found
