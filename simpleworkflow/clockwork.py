"""What a test may put in place of the wall clock and of a step's code, by store.

``simpleworkflow.testing`` runs the real engine, whose clients and workers each open their
own backend from the store's URL. A :class:`Rig` installed for a store's key is found by
every backend opened on that store in this process (the SQLite backend looks when it is
made): its :class:`Clock` is then the time its SQL and its worker read, and its
:class:`StepDoubles` stand in for named steps. Without a rig nothing changes: a backend
that finds none loads its statements and runs its steps as ever, and the look-up is one
dictionary read when the backend is made.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any


class Clock:
    """The wall clock moved forward by what the test skipped: time runs on as usual,
    and jumps when the test (or the harness's automatic skip) advances it."""

    def __init__(self) -> None:
        self._offset = timedelta(0)
        self._lock = threading.Lock()
        #: Told the new offset after each move (the harness's clock table on Postgres).
        self.listeners: list[Callable[[timedelta], None]] = []

    @property
    def offset(self) -> timedelta:
        """How far ahead of the wall clock this clock is."""
        return self._offset

    def now(self) -> datetime:
        return datetime.now(UTC) + self._offset

    def advance(self, seconds: float) -> datetime:
        """Move the clock ``seconds`` forward; return the new now."""
        with self._lock:
            self._offset += timedelta(seconds=seconds)
            for listener in self.listeners:
                listener(self._offset)
        return self.now()

    def sql_now(self) -> str:
        """Now as SQLite writes times (``strftime('%Y-%m-%d %H:%M:%f', 'now')``)."""
        return self.now().strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


@dataclass
class Double:
    """What a named step does instead of its code: raise ``failures`` times (from its
    first try on), then return ``value`` if ``canned``, else run its code."""

    failures: int = 0
    error: Callable[[], BaseException] = lambda: RuntimeError("failure injected by a test")
    canned: bool = False
    value: Any = None
    tries: int = 0  # how many tries of the step met this double


@dataclass
class StepDoubles:
    """Doubles of steps by name, optionally for one workflow type only."""

    doubles: dict[tuple[str | None, str], Double] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def find(self, workflow_type: str, step: str) -> Double | None:
        return self.doubles.get((workflow_type, step)) or self.doubles.get((None, step))

    def stand_in(self, workflow_type: str, step: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn``, or what a double of the step does in its place (a coroutine function
        for a coroutine function, so that the step runs where it would)."""
        double = self.find(workflow_type, step)
        if double is None:
            return fn

        def instead(*args: Any, **kwargs: Any) -> Any:
            if self._fails(double):
                raise double.error()
            return double.value if double.canned else fn(*args, **kwargs)

        async def instead_async(*args: Any, **kwargs: Any) -> Any:
            if self._fails(double):
                raise double.error()
            return double.value if double.canned else await fn(*args, **kwargs)

        return instead_async if inspect.iscoroutinefunction(fn) else instead

    def _fails(self, double: Double) -> bool:
        """Count a try of the double's step; whether this one is to fail."""
        with self._lock:
            double.tries += 1
            return double.tries <= double.failures


@dataclass
class Rig:
    """A store's test clock and step doubles."""

    clock: Clock | None = field(default_factory=Clock)  # None: the store's own clock
    steps: StepDoubles = field(default_factory=StepDoubles)


_rigs: dict[str, Rig] = {}


def install(key: str, rig: Rig) -> None:
    """Have backends opened on the store ``key`` from now on use ``rig``."""
    _rigs[key] = rig


def uninstall(key: str) -> None:
    _rigs.pop(key, None)


def find(key: str) -> Rig | None:
    return _rigs.get(key)


def postgres_key(url: str, schema: str) -> str:
    """The key of a Postgres store: its URL and schema (a SQLite file's is its real path)."""
    return f"{url}#{schema}"


#: The function a rigged SQLite connection reads the test clock through.
SQLITE_NOW = "simpleworkflow_test_now()"


def sqlite_text(sql: str) -> str:
    """A SQLite statement that reads the test clock where it read ``'now'``: every use
    of ``'now'`` in the store's statements is a time value of ``strftime`` or
    ``julianday``, which take the function's text alike."""
    return sql.replace("'now'", SQLITE_NOW)
