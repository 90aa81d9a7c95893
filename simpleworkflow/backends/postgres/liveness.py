"""Telling a slow call from a dead connection: ask the server, over a fresh connection.

A half-open connection (its server side gone: the server's host rebooted, a proxy, NAT
or firewall on the way forgot it) answers nothing, and whoever holds the other end of the
worker's socket (the local kernel, a proxy) keeps acknowledging, so neither TCP
keepalives nor ``tcp_user_timeout`` ever fire: a call on it would wait for its deadline
(``settings.CALL_TIMEOUT``, a minute), and with it every call on the pool's other
connections, which died the same way.

So once a worker's call has waited ``probe_after`` seconds, a probe opens a fresh
connection and asks ``pg_stat_activity`` whether the server still has the session of
each slow call. A call whose session is gone is cut at once (its socket shut down): it
fails with ``StoreUnavailable``, the pool is dropped with the connections opened beside
it, and the caller's retry opens fresh ones. A session that exists is busy (a lock wait,
a long statement) and is left alone, and asked about again when its age has doubled, so
a slow database gets few probes. A probe that cannot connect means the server cannot be
reached at all: the calls' deadline and the leases' give-up deal with that. Standing
connections (the one that listens for wake-ups, which waits by design) are asked about
whenever a probe runs.

Behind a pooler (PgBouncer) the session a client sees is not the server's, and
``pg_stat_activity`` cannot vouch for it: the probe notices (its own session's id is not
the one the server reports) and cuts nothing.

The blocking calls of the sync clients are watched by the deadline's watchdog thread
(``deadline.py``), which asks the same question through :meth:`Liveness.dead_blocking`
and follows the same schedule (:func:`next_probe`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import psycopg

_log = logging.getLogger("simpleworkflow.postgres")

#: Seconds a call waits before the server is asked whether its session still exists: a
#: statement of the library takes milliseconds, so a call this slow is rare and one
#: probe for it is cheap.
PROBE_AFTER = 1.0
#: Seconds a probe may take, connecting included, before it counts as unanswered.
PROBE_TIMEOUT = 5.0

_ALIVE = b"select pg_backend_pid(), array(select pid from pg_stat_activity where pid = any(%s))"


def next_probe(start: float, now: float, probe_after: float) -> float:
    """When a call begun at ``start``, found alive at ``now``, is asked about again: when
    its age has doubled, so that a slow database gets few probes."""
    return now + max(now - start, probe_after)


def report_cut(count: int) -> None:
    """Once per probe that cuts: an operator sees the half-open fault, not only its cost."""
    _log.warning(
        "%d Postgres connection(s) lost their server session without a word "
        "(half-open); cutting them and reconnecting",
        count,
    )


def cut(conn: Any) -> None:
    """Shut ``conn``'s socket down: a call waiting on it ends at once, with an error."""
    with (
        contextlib.suppress(OSError, psycopg.Error),
        socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock,
    ):
        sock.shutdown(socket.SHUT_RDWR)


class Liveness:
    """The calls of one backend in flight, and the probe that finds those that are dead.

    ``connect`` opens a fresh connection for a probe; ``on_dead`` is told when a probe
    cut a call (the backend then drops its pool)."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[psycopg.AsyncConnection[Any]]],
        on_dead: Callable[[], None],
        probe_after: float = PROBE_AFTER,
    ) -> None:
        self._connect = connect
        self._on_dead = on_dead
        self.probe_after = probe_after
        self._due: dict[psycopg.AsyncConnection[Any], tuple[float, float]] = {}  # start, due
        self._standing: set[Any] = set()  # of either face: a sync transaction's too
        self._task: asyncio.Task[None] | None = None
        self._woken: asyncio.Event | None = None

    @contextlib.contextmanager
    def watching(self, conn: psycopg.AsyncConnection[Any]) -> Iterator[None]:
        """Around one call on ``conn``."""
        now = time.monotonic()
        self._due[conn] = (now, now + self.probe_after)
        self._ensure_running()
        try:
            yield
        finally:
            self._due.pop(conn, None)

    @contextlib.contextmanager
    def standing(self, conn: Any) -> Iterator[None]:
        """Around a connection that waits by design, or runs the caller's statements (a
        transactional step's, sync or async): checked whenever a probe runs, a worker's
        or the watchdog's (any thread)."""
        self._standing.add(conn)
        try:
            yield
        finally:
            self._standing.discard(conn)

    def standing_now(self) -> list[Any]:
        """The standing connections, copied at once (another thread may add one)."""
        return list(self._standing.copy())

    def _ensure_running(self) -> None:
        loop = asyncio.get_running_loop()
        task = self._task
        if task is not None and not task.done() and task.get_loop() is loop:
            return
        self._task = loop.create_task(self._run(), name="simpleworkflow-liveness")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None and task.get_loop() is asyncio.get_running_loop():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        while self._due:
            now = time.monotonic()
            due = min(d for _, d in self._due.values())
            if due > now:
                await asyncio.sleep(min(due - now, self.probe_after))
                continue
            slow = [c for c, (_, d) in self._due.items() if d <= now]
            dead = await self.dead([*slow, *self.standing_now()])
            now = time.monotonic()
            for conn in slow:
                if conn in self._due and conn not in dead:
                    start = self._due[conn][0]
                    self._due[conn] = (start, next_probe(start, now, self.probe_after))
            if dead:
                report_cut(len(dead))
                for conn in dead:
                    self._due.pop(conn, None)
                    cut(conn)
                self._on_dead()

    def dead_blocking(self, conns: list[Any]) -> list[Any]:
        """:meth:`dead` for a thread without an event loop (the deadline's watchdog)."""
        return asyncio.run(self.dead(conns))

    async def dead(self, conns: list[Any]) -> list[Any]:
        """Those of ``conns`` (connections of either face: only their session ids are
        read) whose server session is gone; none if the server cannot be asked, or cannot
        vouch for the sessions (a pooler between)."""
        pids = {c.pgconn.backend_pid: c for c in conns if not c.closed}
        if not pids:
            return []
        opened: list[psycopg.AsyncConnection[Any]] = []
        ask = asyncio.ensure_future(self._ask(list(pids), opened))
        try:
            done, _ = await asyncio.wait({ask}, timeout=PROBE_TIMEOUT)
        finally:
            if not ask.done():  # unanswered: no call of the probe may wait on it
                for probe in opened:
                    cut(probe)
                ask.cancel()
        if not done or ask.exception() is not None:
            _log.debug("cannot probe the server (%s)", ask.exception() if done else "timeout")
            return []
        alive = ask.result()
        if alive is None:
            return []  # a pooler between: its session ids are not the server's
        return [conn for pid, conn in pids.items() if pid not in alive]

    async def _ask(
        self, pids: list[int], opened: list[psycopg.AsyncConnection[Any]]
    ) -> set[int] | None:
        """Which of ``pids`` the server has sessions for (None: it cannot tell)."""
        probe = await self._connect()
        opened.append(probe)
        try:
            mine = probe.pgconn.backend_pid
            cursor = await probe.execute(_ALIVE, [pids])
            row = await cursor.fetchone()
        finally:
            await probe.close()
        assert row is not None
        return set(row[1]) if row[0] == mine else None
