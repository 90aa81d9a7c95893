"""A deadline for the blocking calls of the sync clients and admin face.

A blocking psycopg call has no deadline of its own, and a network that swallows packets
while the local kernel still acknowledges them (a proxy, a half-open connection) defeats
TCP's timeouts: the call would wait on its socket forever. So past the deadline one
watchdog thread (one per process, started on first use) shuts the connection's socket
down, which ends the wait at once: the call fails with ``StoreUnavailable``, the
connection is broken and its pool dropped. The async calls of a worker have their
deadline in ``PostgresBackend.execute_async``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from typing import Any

import psycopg

from simpleworkflow import errors


class Deadline:
    """Around one blocking call on ``conn``: cut it off after ``seconds``."""

    def __init__(self, conn: Any, seconds: float) -> None:
        self._conn = conn
        self._seconds = seconds
        self.at = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._over = False  # the call has returned: the connection is not ours to cut
        self._cut = False

    def __enter__(self) -> None:
        _watchdog.watch(self)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        with self._lock:
            self._over = True
        _watchdog.forget(self)
        if self._cut and isinstance(exc, psycopg.OperationalError):
            raise errors.StoreUnavailable(
                f"Postgres did not answer within {self._seconds:g}s; the operation may or "
                "may not have been applied; check the network and the server, then retry"
            ) from exc

    def expire(self) -> None:
        with self._lock:
            if self._over:
                return
            self._cut = True
            with (
                contextlib.suppress(OSError, psycopg.Error),
                socket.socket(fileno=os.dup(self._conn.pgconn.socket)) as sock,
            ):
                sock.shutdown(socket.SHUT_RDWR)


class _Watchdog:
    """The thread that expires deadlines. Calls in flight are few (one per thread that
    uses a client), so it looks through them all when the earliest is due."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active: set[Deadline] = set()
        self._thread: threading.Thread | None = None

    def watch(self, deadline: Deadline) -> None:
        with self._cond:
            self._active.add(deadline)
            if self._thread is None or not self._thread.is_alive():  # or forked since
                self._thread = threading.Thread(
                    target=self._run, name="simpleworkflow-deadlines", daemon=True
                )
                self._thread.start()
            if len(self._active) == 1:
                self._cond.notify()

    def forget(self, deadline: Deadline) -> None:
        with self._cond:
            self._active.discard(deadline)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for deadline in [d for d in self._active if d.at <= now]:
                    self._active.discard(deadline)
                    deadline.expire()
                earliest = min((d.at for d in self._active), default=None)
                self._cond.wait(None if earliest is None else earliest - now)


_watchdog = _Watchdog()
