"""What both clients share: configuration, the ops their calls run, and what follows a
commit (wake-ups for workers in this process, then the observers)."""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, TypeVar

from simpleworkflow import errors, names, observe, payloads
from simpleworkflow.backends import Backend, open_backend, schema_verdict
from simpleworkflow.backends.ops import Op
from simpleworkflow.backends.records import HOLD_FRESH_FOR, CancelledRuns
from simpleworkflow.client import _options, _topics
from simpleworkflow.codec import Codec, reading
from simpleworkflow.models import Published, Run, RunStatus, SignalSent

T = TypeVar("T")
#: What a start of a client without observers enters: no trace context.
_UNOBSERVED: contextlib.AbstractContextManager[dict[str, str] | None] = contextlib.nullcontext(None)
#: How a client's Postgres connections appear in ``pg_stat_activity`` (``application_name``).
CLIENT_NAME = "simpleworkflow client"


class Requests:
    """Each face (blocking or awaited) only decides how the ops built here are executed."""

    def __init__(
        self,
        database_url: str | None = None,
        *,
        schema: str | None = None,
        max_payload_bytes: int = payloads.DEFAULT_MAX_BYTES,
        auto_migrate: bool | None = None,
        backend: Backend | None = None,
        application_name: str = CLIENT_NAME,
        observers: Iterable[observe.Observer] = (),
        codec: Codec | None = None,
    ) -> None:
        self.backend = backend or open_backend(
            database_url, schema=schema, application_name=application_name
        )
        self.max_payload_bytes = max_payload_bytes
        #: Writes the payloads of starts, publishes and signals (``simpleworkflow.codec``):
        #: the app's, so that its handlers read back what was written. ``None``: strict JSON.
        self.codec = codec
        #: Told of each run started and signal sent, once the write has committed (or,
        #: with ``connection=``, once it is written in the caller's transaction).
        self.observers = observe.Observers(observers)
        self._auto_migrate = schema_verdict.auto_migrates(self.backend, auto_migrate)
        self._schema_ok = False
        # A store with notifications (Postgres) wakes every worker from its triggers.
        self._wakes_locally = not self.backend.dialect.has_notifications

    def observe(self, observer: observe.Observer) -> observe.Observer:
        """Register ``observer`` on this client; returns it."""
        self.observers.add(observer)
        return observer

    def _encode(self, payload: Any) -> str:
        """A payload of a publish or a signal as JSON (``None`` is ``{}``)."""
        return payloads.encode(
            {} if payload is None else payload, max_bytes=self.max_payload_bytes, codec=self.codec
        )

    def _starting(
        self, type: str | None
    ) -> contextlib.AbstractContextManager[dict[str, str] | None]:
        """The observers' ``around_start``; gives the trace context to store with the
        runs (what they inject there), if any. Without observers that enclose starts or
        inject a trace (a metrics observer only counts), nothing to enter."""
        return self._observed_start(type) if self.observers.watch_starts() else _UNOBSERVED

    @contextlib.contextmanager
    def _observed_start(self, type: str | None) -> Iterator[dict[str, str] | None]:
        with self.observers.around_start(type):
            yield self.observers.trace_context()

    def _start_op(
        self,
        type: str,
        payload: Any,
        options: Mapping[str, Any],
        trace_context: dict[str, str] | None = None,
    ) -> Op[Run]:
        new = _options.new_run(
            type,
            payload,
            options,
            max_payload_bytes=self.max_payload_bytes,
            trace_context=trace_context,
            codec=self.codec,
        )
        return self.backend.create_run(new)

    def _many_op(
        self,
        requests: Iterable[_options.StartRequest],
        trace_context: dict[str, str] | None = None,
    ) -> Op[builtins.list[Run]]:
        news = _options.new_runs(
            requests,
            max_payload_bytes=self.max_payload_bytes,
            trace_context=trace_context,
            codec=self.codec,
        )
        first = next(news, None)
        if first is None:
            raise errors.InvalidArgument("start_many needs at least one run to start")
        # The rest are checked as the store takes them: a bad one rolls back the batch.
        return self.backend.create_runs(itertools.chain([first], news))

    # ``committed`` is False for a write made inside the caller's transaction
    # (connection=): this process's workers are not woken before it commits (the store's
    # own wake-ups, Postgres's NOTIFY, go out at the commit), and observers are told it
    # may still roll back.

    def _started(self, run: Run, committed: bool = True) -> Run:
        if run.created and committed and self._wakes_locally:
            self.backend.notify_local("wake", _due(run))
        if self.observers:
            self.observers.run_created(observe.RunCreated(run, bool(run.created), committed))
        return run

    def _started_many(self, runs: builtins.list[Run], committed: bool = True) -> builtins.list[Run]:
        # Runs of one batch mostly share their type and due time: one wake-up for each.
        if committed and self._wakes_locally:
            for wake in {(run.type, run.run_at, run.created_at) for run in runs if run.created}:
                self.backend.notify_local("wake", _wake(*wake))
        if self.observers:
            for run in runs:
                self.observers.run_created(observe.RunCreated(run, bool(run.created), committed))
        return runs

    def _publish_op(self, topic: str, payload: Any, event_id: str | None) -> Op[Published]:
        topic = names.validate_topic(topic)
        event_id = names.new_run_id() if event_id is None else names.validate_event_id(event_id)
        text = self._encode(payload)
        return _topics.publish(self.backend, topic, text, event_id)

    def _published(self, published: Published, committed: bool = True) -> Published:
        self._started_many(published.runs, committed)
        return published

    def _cancel_op(self, run_id: str, reason: str | None) -> Op[tuple[CancelledRuns, Run] | None]:
        if reason is not None and (not isinstance(reason, str) or names.unstorable(reason)):
            raise errors.InvalidArgument(
                "a cancel's reason must be text without NUL characters or lone surrogates, "
                f"not {reason!r:.80}"
            )
        return self.backend.cancel_run(names.normalize_run_id(run_id), reason)

    def _cancelled(
        self, run_id: str, outcome: tuple[CancelledRuns, Run] | None, committed: bool = True
    ) -> tuple[CancelledRuns, Run]:
        found = self._found(run_id, outcome)
        for cancelled_id in found[0].ids if committed else ():
            self.backend.notify_local("cancel", cancelled_id)
        return found

    def _settle_for(self, cancelled: CancelledRuns, committed: bool) -> float:
        """How long a committed cancel waits before it returns: while a worker may still
        begin a step of a leased run it cancelled on what it knew from before the commit
        (see ``HOLD_FRESH_FOR``)."""
        if not committed or not cancelled.leased:
            return 0.0
        return HOLD_FRESH_FOR

    def _signal_op(self, run_id: str, event: str, payload: Any) -> Op[SignalSent | str | None]:
        run_id = names.normalize_run_id(run_id)
        text = self._encode(payload)
        return self.backend.send_signal(run_id, names.validate_event(event), text)

    def _signalled(
        self,
        run_id: str,
        event: str,
        outcome: SignalSent | str | None,
        committed: bool = True,
    ) -> SignalSent:
        if outcome is None:
            raise errors.RunNotFound(run_id)
        if isinstance(outcome, str):
            raise errors.RunFinished(
                f"run {run_id} has already finished ({outcome}); signal {event!r} was not "
                "stored (signals are for runs that are pending or running)"
            )
        if outcome.woke and committed:
            self.backend.notify_local("wake", "")
        if self.observers:
            run_id = names.normalize_run_id(run_id)
            self.observers.signal_delivered(observe.SignalDelivered(run_id, event, committed))
        return outcome

    def _read_as(self, data: Any, hint: Any, what: str) -> Any:
        """``data`` read back as type ``hint`` (a read's ``type=``), through this client's
        codec, or a default one (docs/payloads.md)."""
        return reading(self.codec).decode(data, hint, what=what)

    def _result_as(self, run: Run, hint: Any) -> Run:
        """``run`` with its result read as ``hint`` (a read's ``type=``, given): a succeeded
        run's (others have none)."""
        if run.status is not RunStatus.SUCCEEDED:
            return run
        result = self._read_as(run.result, hint, f"result of run {run.id}")
        return dataclasses.replace(run, result=result)

    @staticmethod
    def _found(run_id: str, value: T | None) -> T:
        if value is None:
            raise errors.RunNotFound(run_id)
        return value


def _due(run: Run) -> str:
    """A wake-up message for in-process workers: the run's type and when it is due."""
    return _wake(run.type, run.run_at, run.created_at)


def _wake(type_name: str, run_at: datetime, created_at: datetime) -> str:
    """``<type>`` for a run due at once, ``<type> <due epoch>`` for one due later: a due
    time is on the database's clock, which the worker's need not match."""
    return f"{type_name} {run_at.timestamp()}" if run_at > created_at else type_name
