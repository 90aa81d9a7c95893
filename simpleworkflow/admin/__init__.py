"""Operator actions in one place: what the CLI, the HTTP API and the dashboard share.

``Admin`` and ``AsyncAdmin`` (module ``faces``) are two faces of one implementation, as
the clients are: a verb's arguments are checked and its backend op built once, in
``verbs``, and a face only runs the op (blocking, or awaited) and does what must follow
the commit. Reach one through a client (``client.admin``, on the client's connections) or
open one on a database URL (``Admin("postgresql://...")``), then:

- the registry: :meth:`~Admin.registry`, :meth:`~Admin.set_runtime`, :meth:`~Admin.pause`,
  :meth:`~Admin.resume`;
- the types at a glance: :meth:`~Admin.stats` (runs by state, the oldest due run's age,
  the registry entry), or its parts :meth:`~Admin.counts` and :meth:`~Admin.oldest_due`;
- what is under way, cheaply enough for every metrics scrape: :meth:`~Admin.queues`;
- one run: :meth:`~Admin.retry`, :meth:`~Admin.events`, :meth:`~Admin.steps` (timed),
  :meth:`~Admin.children`;
- what the dashboard charts: :meth:`~Admin.throughput` (outcomes per minute),
  :meth:`~Admin.workers` (live and recently gone workers, with the runs each holds);
- retention: :meth:`~Admin.set_retention` (a type's), :meth:`~Admin.sweep` (delete the
  runs past theirs);
- topics: :meth:`~Admin.subscribe`, :meth:`~Admin.unsubscribe`, :meth:`~Admin.subscriptions`;
- cron schedules: :attr:`~Admin.schedules` (also ``client.schedules``);
- housekeeping: :meth:`~Admin.purge`, :meth:`~Admin.migrate`, :meth:`~Admin.migration_sql`,
  :meth:`~Admin.replay_check`;
- the optional payload index (Postgres): :meth:`~Admin.create_payload_index`,
  :meth:`~Admin.drop_payload_index`, :meth:`~Admin.payload_index`.
"""

from simpleworkflow.admin.faces import Admin, AsyncAdmin
from simpleworkflow.admin.records import (
    STATES,
    WORKER_STATES,
    Minute,
    Queues,
    QueueStats,
    SweepReport,
    TypeStats,
    Worker,
    registry_dict,
)
from simpleworkflow.admin.schedules import AsyncSchedules, Schedules
from simpleworkflow.admin.verbs import ADMIN_NAME, check_runtime
from simpleworkflow.models import PayloadIndex

__all__ = [
    "ADMIN_NAME",
    "STATES",
    "WORKER_STATES",
    "Admin",
    "AsyncAdmin",
    "AsyncSchedules",
    "Minute",
    "PayloadIndex",
    "QueueStats",
    "Queues",
    "Schedules",
    "SweepReport",
    "TypeStats",
    "Worker",
    "check_runtime",
    "registry_dict",
]
