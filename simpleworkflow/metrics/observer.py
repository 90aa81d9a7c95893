"""The counters and histograms: an observer that counts what this process sees happen.

Each hook the engine fires (see ``observe``) moves a counter or a histogram, labelled by
workflow type and by what happened (outcome, status, wait kind), never by run: a label
value per run would make a series per run. Step and signal names are the user's, and
some code builds them from data (``f"charge-{order_id}"``), so each label takes at most
``max_names`` values per type; later ones are counted as ``OTHER``, with one warning.

Counters live in the process that saw the event: a worker counts its attempts, a client
the runs it started. Prometheus sums them across processes (``sum(rate(...))``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Histogram

from simpleworkflow import observe

_log = logging.getLogger("simpleworkflow.metrics")

#: Seconds, from a millisecond to a day: a no-op step and a run that slept overnight
#: both land in a bucket of their own.
BUCKETS: Final = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0,
)  # fmt: skip
#: The label value that stands for every step or signal name past ``max_names``.
OTHER: Final = "_other"
MAX_NAMES: Final = 100
#: Attempt outcomes that end the run (the ``status`` label of the run duration).
_TERMINAL = frozenset({observe.SUCCEEDED, observe.FAILED, observe.CANCELLED, observe.CONTINUED})


class _Names:
    """At most ``limit`` distinct names per type; past that, :data:`OTHER`."""

    def __init__(self, what: str, limit: int) -> None:
        self._what = what
        self._limit = limit
        self._seen: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def __call__(self, type_name: str, name: str) -> str:
        seen = self._seen.get(type_name)
        if seen is not None and name in seen:
            return name
        with self._lock:
            seen = self._seen.setdefault(type_name, set())
            if name in seen or len(seen) < self._limit:
                seen.add(name)
                return name
            first = OTHER not in seen
            seen.add(OTHER)
        if first:
            _log.warning(
                "more than %d %s names for %s: later ones are counted as %r in metrics "
                "(a name built from data makes a series per run; raise max_names if they "
                "are really that many)",
                self._limit,
                self._what,
                type_name or "every type",
                OTHER,
            )
        return OTHER


def _children(metric: Any) -> Callable[..., Any]:
    """``metric.labels(*values)``, remembered: a dict look-up on the hot path instead of
    the library's checks and lock."""
    cache: dict[tuple[str, ...], Any] = {}

    def child(*values: str) -> Any:
        found = cache.get(values)
        if found is None:
            found = cache[values] = metric.labels(*values)
        return found

    return child


class MetricsObserver(observe.Observer):
    """Counters and histograms of runs, attempts, steps, signals and leases, registered
    on ``registry``. Register it on an :class:`~simpleworkflow.App` (its workers) and on
    clients and admins (runs started, signals sent, runs deleted)."""

    def __init__(self, registry: CollectorRegistry, *, max_names: int = MAX_NAMES) -> None:
        self._step_names = _Names("step", max_names)
        self._signal_names = _Names("signal", max_names)

        def counter(name: str, doc: str, labels: Sequence[str] = ()) -> Callable[..., Any]:
            metric = Counter(f"simpleworkflow_{name}", doc, labels, registry=registry)
            return _children(metric) if labels else lambda: metric

        def histogram(name: str, doc: str, labels: Sequence[str]) -> Callable[..., Any]:
            metric = Histogram(
                f"simpleworkflow_{name}", doc, labels, registry=registry, buckets=BUCKETS
            )
            return _children(metric)

        self._started = counter(
            "runs_started", "Runs stored by a client or a parent workflow.", ["type"]
        )
        self._deduplicated = counter(
            "runs_deduplicated",
            "Starts whose idempotency key was taken: the existing run came back.",
            ["type"],
        )
        self._attempts = counter(
            "attempts_finished",
            "Attempts finished, by outcome: succeeded, failed (for good), retried, "
            "suspended, cancelled, lease_lost, stopped.",
            ["type", "outcome"],
        )
        self._steps = counter(
            "steps_finished",
            "Steps that ran to an end: completed, or failed once no retry was left.",
            ["type", "step", "outcome"],
        )
        self._step_retries = counter(
            "step_retries", "Failed step attempts that are retried.", ["type", "step"]
        )
        self._suspended = counter(
            "runs_suspended",
            "Runs that gave their lease back to wait, by kind: sleep, signal, child, retry, "
            "throttle, any.",
            ["type", "kind"],
        )
        self._signals_sent = counter("signals_sent", "Signals stored by a client.", ["signal"])
        self._signals_consumed = counter(
            "signals_consumed", "Signals taken by the run waiting for them.", ["type", "signal"]
        )
        self._leases_lost = counter(
            "leases_lost",
            "Handlers stopped because their lease was taken or not renewed in time "
            "(reason: taken, not_renewed).",
            ["type", "reason"],
        )
        self._reaped = counter(
            "leases_reaped", "Expired leases of dead or frozen workers given back."
        )
        self._deleted = counter(
            "runs_deleted", "Finished runs deleted by retention: the sweeper or a purge.", ["type"]
        )
        self._values_set = counter(
            "values_set", "Values published by runs (ctx.set_value).", ["type"]
        )
        self._stream_items = counter(
            "stream_items", "Items appended to runs' streams and committed.", ["type"]
        )
        self._streams_closed = counter(
            "streams_closed", "Streams closed by their run (ctx.stream_close).", ["type"]
        )
        self._forked = counter("runs_forked", "Runs forked from a step (admin.fork).", ["type"])
        self._attempt_seconds = histogram(
            "attempt_duration_seconds",
            "Seconds one call of a handler took, by outcome.",
            ["type", "outcome"],
        )
        self._run_seconds = histogram(
            "run_duration_seconds",
            "Seconds from a run's creation to its end, by final status.",
            ["type", "status"],
        )
        self._step_seconds = histogram(
            "step_duration_seconds",
            "Seconds one attempt of a step's function took, completed or failed.",
            ["type", "step"],
        )
        self._queue_seconds = histogram(
            "queue_wait_seconds",
            "Seconds from a run being due to a worker claiming it.",
            ["type"],
        )

    # -- producer side ------------------------------------------------------------------

    def run_created(self, event: observe.RunCreated) -> None:
        if event.created:
            self._started(event.run.type).inc()
        else:
            self._deduplicated(event.run.type).inc()

    def signal_delivered(self, event: observe.SignalDelivered) -> None:
        self._signals_sent(self._signal_names("", event.event)).inc()

    def runs_deleted(self, event: observe.RunsDeleted) -> None:
        self._deleted(event.type).inc(event.count)

    def run_forked(self, event: observe.RunForked) -> None:
        self._forked(event.run.type).inc()

    # -- worker side --------------------------------------------------------------------

    def run_claimed(self, event: observe.RunClaimed) -> None:
        self._queue_seconds(event.run.type).observe(event.queued_for)

    def attempt_finished(self, event: observe.AttemptFinished) -> None:
        run, outcome = event.run, event.outcome
        self._attempts(run.type, outcome).inc()
        self._attempt_seconds(run.type, outcome).observe(event.duration)
        if outcome in _TERMINAL and isinstance(run.created_at, datetime):
            lived = (datetime.now(UTC) - run.created_at).total_seconds()
            self._run_seconds(run.type, outcome).observe(max(lived, 0.0))

    def run_suspended(self, event: observe.RunSuspended) -> None:
        self._suspended(event.run.type, event.kind).inc()

    def step_completed(self, event: observe.StepCompleted) -> None:
        type_name = event.run.type
        step = self._step_names(type_name, event.step)
        self._steps(type_name, step, "completed").inc()
        self._step_seconds(type_name, step).observe(event.duration)

    def step_failed(self, event: observe.StepFailed) -> None:
        type_name = event.run.type
        step = self._step_names(type_name, event.step)
        self._step_seconds(type_name, step).observe(event.duration)
        if not event.retrying:
            self._steps(type_name, step, "failed").inc()

    def step_retried(self, event: observe.StepRetried) -> None:
        type_name = event.run.type
        self._step_retries(type_name, self._step_names(type_name, event.step)).inc()

    def signal_consumed(self, event: observe.SignalConsumed) -> None:
        type_name = event.run.type
        self._signals_consumed(type_name, self._signal_names(type_name, event.event)).inc()

    def lease_lost(self, event: observe.LeaseLost) -> None:
        self._leases_lost(event.run.type, event.reason.replace(" ", "_")).inc()

    def leases_reaped(self, event: observe.LeasesReaped) -> None:
        self._reaped().inc(len(event.run_ids))

    def value_set(self, event: observe.ValueSet) -> None:
        self._values_set(event.run.type).inc()

    def stream_appended(self, event: observe.StreamAppended) -> None:
        self._stream_items(event.run.type).inc(event.items)

    def stream_closed(self, event: observe.StreamClosed) -> None:
        self._streams_closed(event.run.type).inc()
