"""The options of a start, declared once: ``start``'s keywords, ``start_many``'s dict keys
and the CLI's ``start`` flags all go through :class:`StartOptions` and :func:`new_run`.

Adding an option takes a key here, its check in :func:`new_run`, the field of
:class:`~simpleworkflow.backends.records.NewRun` it becomes (what the store writes), and
its column in ``create_run`` and ``create_runs`` of both ``queries.sql`` files; the
clients and the CLI pass options through without naming them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, TypedDict

from simpleworkflow import durations, errors, names, payloads, retention
from simpleworkflow.backends.records import NewRun, plain_new_run
from simpleworkflow.client import _debounce

MAX_KEY_LENGTH = names.MAX_KEY_LENGTH
#: The longest delay (and deadline, debounce window...): see ``durations.MAX_SECONDS``.
MAX_DELAY_SECONDS = durations.MAX_SECONDS


class StartOptions(TypedDict, total=False):
    """The keyword arguments of ``start`` (see docs/client.md); all optional."""

    #: A repeated key returns the run that holds it and writes nothing.
    idempotency_key: str | None
    #: Lower runs earlier; default 100.
    priority: int
    #: Not before this timezone-aware time.
    run_at: datetime | None
    #: Not before this long from now (``30``, ``"5m"``, a ``timedelta``).
    delay: durations.Duration | None
    #: Attempts before the run fails; default 3.
    max_attempts: int | None
    #: Fail the run if it has not finished by then: a time, or a duration from now.
    deadline: datetime | durations.Duration | None
    #: Keep the run this long after it finishes (``"90d"``), instead of its type's
    #: retention or the default; at most the ceiling, ``$SIMPLEWORKFLOW_MAX_RETENTION_DAYS``.
    retention: durations.Duration | None
    #: Count the run against its type's per-key concurrency limit under this key (a
    #: customer id, say; see docs/flow-control.md).
    concurrency_key: str | None
    #: Starts with this key collapse into one run, due a window after the last:
    #: ``("key", "30s")`` or a :class:`~simpleworkflow.client.Debounce`.
    debounce: _debounce.DebounceSpec | None


#: The names of the start options, for code that passes them through.
OPTIONS: frozenset[str] = StartOptions.__optional_keys__

#: What ``start_many`` takes for each run: ``(type, payload)`` or a dict of start() arguments.
StartRequest = tuple[str, Any] | Mapping[str, Any]


def new_run(
    type: str,
    payload: Any,
    options: Mapping[str, Any],
    *,
    max_payload_bytes: int = payloads.DEFAULT_MAX_BYTES,
    parent_id: str | None = None,
    trace_context: Mapping[str, str] | None = None,
    codec: payloads.Encoding | None = None,
) -> NewRun:
    """Check a start request and turn it into what the store writes; ``trace_context``
    is what the client's observers inject (see ``observe.Observers.trace_context``)."""
    # The common start names no option: every field keeps its default, unchecked.
    fields = _checked_options(options) if options else {}
    return NewRun(
        type=names.validate_type(type),
        payload=payloads.encode(
            {} if payload is None else payload, max_bytes=max_payload_bytes, codec=codec
        ),
        parent_id=parent_id,
        trace_context=None if trace_context is None else json.dumps(dict(trace_context)),
        **fields,
    )


def _checked_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of :class:`NewRun` that ``options`` set, checked."""
    unknown = sorted(options.keys() - OPTIONS)
    if unknown:
        known = ", ".join(sorted(OPTIONS))
        raise TypeError(f"unknown start option {unknown[0]!r}; the options are {known}")
    run_at = options.get("run_at")
    delay = options.get("delay")
    deadline = options.get("deadline")
    if run_at is not None and delay is not None:
        raise errors.InvalidArgument("give either run_at or delay, not both")
    debounce = _debounce.check(options.get("debounce"), options, max_key=MAX_KEY_LENGTH)
    return {
        "idempotency_key": _check_key(options.get("idempotency_key")),
        "priority": names.check_priority(options.get("priority", 100)),
        "run_at": None if run_at is None else durations.check_time(run_at, what="run_at"),
        "delay": 0.0 if delay is None else durations.to_seconds(delay, what="delay"),
        "max_attempts": names.check_max_attempts(options.get("max_attempts")),
        "deadline": (
            durations.check_time(deadline, what="deadline")
            if isinstance(deadline, datetime)
            else None
        ),
        "deadline_in": (
            None
            if deadline is None or isinstance(deadline, datetime)
            else durations.to_seconds(deadline, what="deadline")
        ),
        "retention": retention.check(options.get("retention")),
        "concurrency_key": _check_key(options.get("concurrency_key"), "concurrency_key"),
        **({} if debounce is None else debounce.params()),
    }


def new_runs(
    requests: Iterable[StartRequest],
    *,
    max_payload_bytes: int,
    trace_context: Mapping[str, str] | None = None,
    codec: payloads.Encoding | None = None,
) -> Iterator[tuple[str, NewRun]]:
    """``(new run id, checked request)`` for each of ``start_many``'s requests, each
    with the batch's ``trace_context``."""
    ids = names.new_run_ids()
    trace = None if trace_context is None else json.dumps(dict(trace_context))
    for request in requests:
        if type(request) is tuple and len(request) == 2:
            # the common request: no option to check, every field at its default
            type_name, payload = request
            checked = names.validate_type(type_name)
            text = payloads.encode(
                {} if payload is None else payload, max_bytes=max_payload_bytes, codec=codec
            )
            yield next(ids), plain_new_run(checked, text, trace)
            continue
        if isinstance(request, tuple):
            type_name, payload = request
            options: Mapping[str, Any] = {}
        elif isinstance(request, Mapping):
            if "type" not in request:
                raise TypeError("a start_many request needs a 'type'")
            options = {k: v for k, v in request.items() if k not in ("type", "payload")}
            if options.get("debounce") is not None:
                raise errors.InvalidArgument(
                    "start_many does not debounce: each debounced call updates the run of "
                    "its key in place, one statement per call; use start() for each (with "
                    "connection= to commit them together: see docs/flow-control.md)"
                )
            type_name, payload = request["type"], request.get("payload")
        else:
            raise errors.InvalidArgument(
                "start_many takes (type, payload) pairs or dicts of start() arguments, "
                f"not {type(request).__name__}"
            )
        yield (
            next(ids),
            new_run(
                type_name,
                payload,
                options,
                max_payload_bytes=max_payload_bytes,
                trace_context=trace_context,
                codec=codec,
            ),
        )


def _check_key(key: object, what: str = "idempotency_key") -> str | None:
    return names.validate_key(key, what)
