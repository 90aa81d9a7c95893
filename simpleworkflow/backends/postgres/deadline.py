"""A deadline for the blocking calls of the sync clients and admin face, and the liveness
probe that spares them the deadline on a half-open connection.

A blocking psycopg call has no deadline of its own, and a network that swallows packets
while the local kernel still acknowledges them (a proxy, a half-open connection) defeats
TCP's timeouts: the call would wait on its socket forever. So past the deadline one
watchdog thread (one per process, started on first use) shuts the connection's socket
down, which ends the wait at once: the call fails with ``StoreUnavailable``, the
connection is broken and its pool dropped. The async calls of a worker have their
deadline in ``PostgresBackend.execute_async``.

A deadline is a minute, too long to wait on a connection whose server side is gone
(half-open). So, as for the async calls (``liveness.py``), a call that has waited
``probe_after`` has the server asked over a fresh connection whether its session still
exists, by a thread of its own so that the watchdog keeps its time; a call whose session
is gone is cut at once, one whose session exists is asked about again when its age has
doubled, and a probe that cannot connect, or sees a pooler between, cuts nothing.

Watching a call costs it no wake-up of the watchdog: while calls come and go, the
watchdog looks through them again one lead after it last looked (the shortest time from
a call's start to its deadline or first probe, among the calls made since), so a new
call like them is due no sooner than it would look anyway; only a call due sooner (a
shorter deadline) wakes it. A watchdog that finds no call made since it last looked
sleeps until the next one wakes it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

import psycopg

from simpleworkflow import errors
from simpleworkflow.backends.postgres import liveness

_log = logging.getLogger("simpleworkflow.postgres")


class Deadline:
    """Around one blocking call on ``conn``: cut it off after ``seconds``, or as soon as
    ``probe`` finds its server session gone (``None``: the deadline alone)."""

    def __init__(self, conn: Any, seconds: float, probe: liveness.Liveness | None = None) -> None:
        self.conn = conn
        self._seconds = seconds
        self.began = time.monotonic()
        self.at = self.began + seconds
        self.probe = probe
        #: When the server is asked about this call next (infinity: not, or being asked).
        self.probe_at = math.inf if probe is None else self.began + probe.probe_after
        # Both under the watchdog's lock, which it holds whenever it cuts a call.
        self._over = False  # the call has returned: the connection is not ours to cut
        self._cut: str | None = None  # why it was cut: "deadline" or "session gone"

    @property
    def first(self) -> float:
        """When the watchdog must look at this call next: its deadline, or its probe."""
        return min(self.at, self.probe_at)

    def __enter__(self) -> None:
        _watchdog.watch(self)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        _watchdog.forget(self)
        if self._cut is None or not isinstance(exc, psycopg.OperationalError):
            return
        if self._cut == "deadline":
            raise errors.StoreUnavailable(
                f"Postgres did not answer within {self._seconds:g}s; the operation may or "
                "may not have been applied; check the network and the server, then retry"
            ) from exc
        raise errors.StoreUnavailable(
            "the Postgres server no longer has this connection's session (the connection "
            "went half-open: a server restart, or a proxy or firewall that forgot it); the "
            "operation may or may not have been applied; retry, on a fresh connection"
        ) from exc

    def expire(self, why: str = "deadline") -> None:
        """Cut the call off, unless it has returned; the watchdog's lock is held."""
        if self._over:
            return
        self._cut = why
        liveness.cut(self.conn)


class _Watchdog:
    """The thread that expires deadlines and starts probes. Calls in flight are few (one
    per thread that uses a client), so it looks through them all when the earliest is due."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active: set[Deadline] = set()
        self._thread: threading.Thread | None = None
        self._wakes_at = math.inf  # when the thread looks next without being woken
        # The shortest time from a call's start to its first look, among the calls
        # watched since the thread last looked (infinity: none).
        self._lead = math.inf

    def watch(self, deadline: Deadline) -> None:
        with self._cond:
            self._active.add(deadline)
            self._lead = min(self._lead, deadline.first - deadline.began)
            if self._thread is None or not self._thread.is_alive():  # or forked since
                self._wakes_at = math.inf
                self._thread = threading.Thread(
                    target=self._run, name="simpleworkflow-deadlines", daemon=True
                )
                self._thread.start()
            elif deadline.first < self._wakes_at:
                self._cond.notify()

    def forget(self, deadline: Deadline) -> None:
        """The call has returned: from now on it is not cut."""
        with self._cond:
            deadline._over = True
            self._active.discard(deadline)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for deadline in [d for d in self._active if d.at <= now]:
                    self._active.discard(deadline)
                    deadline.expire()
                self._start_probes([d for d in self._active if d.probe_at <= now])
                # Calls come and go: look again one lead from now (none came: no lead).
                earliest = min((d.first for d in self._active), default=math.inf)
                earliest = min(earliest, now + self._lead)
                self._lead = math.inf
                self._wakes_at = earliest
                self._cond.wait(None if earliest == math.inf else earliest - now)

    def _start_probes(self, slow: list[Deadline]) -> None:
        """One probe per backend (its server) for its slow calls, each in a thread: a
        probe may wait seconds to connect, and deadlines must not wait for it."""
        by_probe: dict[liveness.Liveness, list[Deadline]] = {}
        for deadline in slow:
            assert deadline.probe is not None
            deadline.probe_at = math.inf  # until this probe has answered
            by_probe.setdefault(deadline.probe, []).append(deadline)
        for probe, calls in by_probe.items():
            threading.Thread(
                target=self._probe, args=(probe, calls), name="simpleworkflow-probe", daemon=True
            ).start()

    def _probe(self, probe: liveness.Liveness, calls: list[Deadline]) -> None:
        standing = probe.standing_now()
        try:
            dead = probe.dead_blocking([*(d.conn for d in calls), *standing])
        except Exception:  # dead() answers [] to the failures it expects; others decide nothing too
            _log.exception("the liveness probe failed")
            dead = []
        now = time.monotonic()
        with self._cond:
            gone = [d for d in calls if d.conn in dead and d in self._active]
            lost = [conn for conn in standing if conn in dead]
            if gone or lost:
                liveness.report_cut(len(gone) + len(lost))
            for deadline in gone:
                self._active.discard(deadline)
                deadline.expire("session gone")
            for conn in lost:  # a transaction's: its statement fails, its pool goes
                liveness.cut(conn)
            for deadline in self._active.intersection(calls):
                deadline.probe_at = liveness.next_probe(deadline.began, now, probe.probe_after)
            self._cond.notify()


_watchdog = _Watchdog()
