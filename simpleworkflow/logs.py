"""Logs from inside a run: every record says which run, attempt and step it came from.

The worker sets a context variable for each attempt and, around each step's code, the
step's name (see ``worker.running`` and ``durable.steps``). Context variables follow the code into
the handler's task, its threads and its durable calls, so :class:`RunContextFilter`, on a
logging handler, can copy them onto every record that passes, as ``run_id``,
``run_type``, ``attempt`` (from 1) and ``step``: the handler's own ``logging`` calls, on
any logger, carry them as much as the worker's do. ``simpleworkflow worker`` installs it
(:func:`configure`), with a text format or :class:`JsonFormatter`'s one JSON object per
line. The standard library only.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
import logging
import sys
import time
from dataclasses import dataclass
from typing import Any, Final

#: The record attributes the filter sets (None outside a run), in this order.
FIELDS: Final = ("run_id", "run_type", "attempt", "step")
#: The formats :func:`configure` knows.
FORMATS: Final = ("text", "json")


@dataclass(frozen=True, slots=True)
class RunLogContext:
    """Where the code that logs runs: a run's attempt (from 1), and the step if in one."""

    run_id: str
    run_type: str
    attempt: int
    step: str | None = None


_current: contextvars.ContextVar[RunLogContext | None] = contextvars.ContextVar(
    "simpleworkflow_log_context", default=None
)


def current() -> RunLogContext | None:
    """The run the calling code runs for, if any."""
    return _current.get()


def enter_attempt(run_id: str, run_type: str, attempt: int) -> None:
    """Say, for the rest of the calling task (and what it starts), which attempt runs.

    Called first thing in the attempt's own task, whose context ends with it."""
    _current.set(RunLogContext(run_id, run_type, attempt))


class in_step:  # lower case: used as a function, ``with logs.in_step(name):``
    """Name step ``name`` in this context for the ``with`` block (outside a run: nothing).

    A class rather than a generator: it encloses every step, and costs less."""

    __slots__ = ("_name", "_token")

    def __init__(self, name: str) -> None:
        self._name = name
        self._token: contextvars.Token[RunLogContext | None] | None = None

    def __enter__(self) -> None:
        where = _current.get()
        if where is not None:
            # the constructor, not dataclasses.replace, which reads the fields each call
            step = RunLogContext(where.run_id, where.run_type, where.attempt, self._name)
            self._token = _current.set(step)

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _current.reset(self._token)


class RunContextFilter(logging.Filter):
    """Sets ``run_id``, ``run_type``, ``attempt`` and ``step`` on each record (None when it
    was not logged from inside a run); drops nothing.

    Put it on a *handler*: a logger's filters see only the records logged on that very
    logger, a handler's see every record it writes. Values given with ``extra=`` stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        where = _current.get()
        values = (None,) * len(FIELDS) if where is None else dataclasses.astuple(where)
        for name, value in zip(FIELDS, values, strict=True):
            if not hasattr(record, name):
                setattr(record, name, value)
        return True


def utc_time(record: logging.LogRecord) -> str:
    """``2025-01-31T09:30:00.123Z``: UTC like every time the command line prints, so that
    logs line up with ``runs show`` and with other machines' logs."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{stamp}.{int(record.msecs):03d}Z"


class TextFormatter(logging.Formatter):
    """``2025-01-31T09:30:00.123Z INFO simpleworkflow.worker: message``, one line per record
    (a traceback follows on lines of its own). A record logged from inside a run by the
    user's code ends with ``[run … <type> attempt 2 step charge]``; simpleworkflow's own
    lines name their run in the message already."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return utc_time(record)

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        run_id = getattr(record, "run_id", None)
        if run_id is None or record.name.partition(".")[0] == "simpleworkflow":
            return line
        run_type, attempt = getattr(record, "run_type", None), getattr(record, "attempt", None)
        where = f"run {run_id} {run_type} attempt {attempt}"
        step = getattr(record, "step", None)
        return f"{line} [{where}{f' step {step}' if step else ''}]"


#: What every LogRecord has: anything else on a record came from ``extra=`` or a filter.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    *FIELDS,
}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (UTC), ``level``, ``logger``, ``message``, the
    run's fields when logged from inside a run, any ``extra=`` values (a tracer's
    ``trace_id``, say), and ``exception`` or ``stack`` with their text."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": utc_time(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            if (value := getattr(record, name, None)) is not None:
                out[name] = value
        for name, value in vars(record).items():
            if name not in _STANDARD and not name.startswith("_"):
                out[name] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=repr)


def formatter(log_format: str) -> logging.Formatter:
    """The formatter of ``text`` or ``json``."""
    if log_format == "json":
        return JsonFormatter()
    if log_format == "text":
        return TextFormatter()
    raise ValueError(f"unknown log format {log_format!r}; the formats are {', '.join(FORMATS)}")


def configure(level: str | int = "info", log_format: str = "text") -> logging.Handler:
    """Send every record to stderr in ``log_format``, with the run's fields; return the
    handler. What ``simpleworkflow worker`` does; an embedded worker may call it too."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format))
    handler.addFilter(RunContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper() if isinstance(level, str) else level)
    return handler
