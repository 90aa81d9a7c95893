"""The gauges: read from the database at scrape time, so every process reports the same.

A process only knows what it did itself; how deep a queue is, how late its oldest run,
how many runs are in flight and how many workers hold them are facts of the database.
So each scrape asks it, with :meth:`~simpleworkflow.admin.Admin.queues`: one statement
that reads pending runs from the ``(type, run_at)`` index of pending runs and leased runs
from the lease index, never a finished run. Any number of worker processes report the
same values; aggregate them with ``max``, not ``sum``.

A scrape when the database cannot answer still returns the process's counters, with
``simpleworkflow_store_up`` at 0 and none of these gauges.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from simpleworkflow.admin import Admin, Queues

_log = logging.getLogger("simpleworkflow.metrics")


def _families() -> dict[str, GaugeMetricFamily]:
    """Every gauge of a scrape, empty."""

    def gauge(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
        return GaugeMetricFamily(f"simpleworkflow_{name}", doc, labels=labels or [])

    return {
        "runs": gauge(
            "runs",
            "Unfinished runs by status: pending (due or not) and leased (in flight).",
            ["type", "status"],
        ),
        "due": gauge("runs_due", "Pending runs due now: the queue to claim.", ["type"]),
        "oldest": gauge(
            "oldest_due_seconds",
            "Seconds since the oldest due pending run became due; 0 when none is due.",
            ["type"],
        ),
        "expired": gauge(
            "leases_expired",
            "Leased runs whose lease ran out (a dead or frozen worker's), not yet given back.",
            ["type"],
        ),
        "paused": gauge("type_paused", "1 when the type is paused in the registry.", ["type"]),
        "workers": gauge("workers_seen", "Workers holding at least one lease."),
        "up": gauge("store_up", "1 when this scrape could read the database, else 0."),
        "took": gauge("store_scrape_seconds", "Seconds this scrape's database read took."),
    }


class StoreGauges:
    """A collector (in ``prometheus_client``'s sense) of the gauges, read with ``admin``."""

    def __init__(self, admin: Admin) -> None:
        self._admin = admin
        self._failing = False

    def describe(self) -> Iterator[Metric]:
        """The gauges' names, so that a registry can refuse duplicates without a query."""
        yield from _families().values()

    def collect(self) -> Iterator[Metric]:
        families = _families()
        began = time.perf_counter()
        queues = self._read()
        families["took"].add_metric([], time.perf_counter() - began)
        families["up"].add_metric([], 0.0 if queues is None else 1.0)
        if queues is not None:
            _fill(families, queues)
        yield from families.values()

    def _read(self) -> Queues | None:
        """The queues, or None when the database cannot answer: logged with its traceback
        the first time, then once it answers again."""
        try:
            queues = self._admin.queues()
        except Exception:
            level = logging.DEBUG if self._failing else logging.WARNING
            _log.log(level, "metrics: cannot read the queues' gauges", exc_info=True)
            self._failing = True
            return None
        if self._failing:
            _log.info("metrics: the queues' gauges can be read again")
            self._failing = False
        return queues


def _fill(families: dict[str, GaugeMetricFamily], queues: Queues) -> None:
    for stats in queues.types:
        name = stats.type
        families["runs"].add_metric([name, "pending"], stats.pending)
        families["runs"].add_metric([name, "leased"], stats.leased)
        families["due"].add_metric([name], stats.due)
        families["oldest"].add_metric([name], stats.oldest_due or 0.0)
        families["expired"].add_metric([name], stats.expired_leases)
        families["paused"].add_metric([name], 1.0 if stats.paused else 0.0)
    families["workers"].add_metric([], queues.workers)
