"""Topic verbs: the subscriptions of workflow types to topic patterns.

Publishing is not a verb of its own: a client reads the subscriptions matching a topic
(:meth:`TopicOps.list_subscriptions`) and starts their runs with ``create_runs``, in one
transaction (see :mod:`simpleworkflow.client._topics`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simpleworkflow.backends.core import StoreCore, read_int
from simpleworkflow.backends.ops import Op
from simpleworkflow.models import Subscription


class TopicOps(StoreCore):
    def subscribe(
        self, pattern: str, type: str, priority: int, max_attempts: int | None
    ) -> Op[Subscription]:
        """Subscribe ``type`` to ``pattern``; a subscription that exists takes the new
        start options."""
        rows = yield self.stmt(
            "subscribe", pattern=pattern, type=type, priority=priority, max_attempts=max_attempts
        )
        return self.subscription_from_row(rows[0])

    def unsubscribe(self, pattern: str, type: str) -> Op[bool]:
        """Remove a subscription; ``False`` if there was none."""
        rows = yield self.stmt("unsubscribe", pattern=pattern, type=type)
        return bool(rows)

    def list_subscriptions(
        self, *, topic: str | None = None, type: str | None = None
    ) -> Op[list[Subscription]]:
        """The subscriptions, by pattern then type: all, those of ``type``, or those whose
        pattern matches ``topic``."""
        rows = yield self.stmt("list_subscriptions", topic=topic, type=type)
        return [self.subscription_from_row(row) for row in rows]

    def subscription_from_row(self, row: Mapping[str, Any]) -> Subscription:
        return Subscription(
            pattern=row["pattern"],
            workflow_type=row["workflow_type"],
            priority=read_int(row["priority"]),
            max_attempts=read_int(row["max_attempts"]),
            created_at=self.read_time(row["created_at"]),
            updated_at=self.read_time(row["updated_at"]),
        )
