"""Readers waiting on runs woken by their writers' notifications rather than by their next
poll: a value's reader (``client.wait_value``; ``set_value`` notifies channel
``simpleworkflow_value``) and a stream's (``client.read_stream``; each batch written
notifies ``simpleworkflow_stream``), the payload being the run's id.

One :class:`Hub` per backend listens for all of them, on one connection, however many
readers wait: a thread of its own reads the notifications and wakes the readers
registered for that run (a thread's ``threading.Event``, or an ``asyncio.Event`` set
through its own loop, so readers on any thread or event loop are served). The connection
opens with the first reader, closes with the client, and opens again for the next reader
after it broke. A reader registers before its first read, so a write committed after
that read is heard; it waits on the hub between reads, for at most the pause it would
have slept.

When the connection breaks, each reader registered then is told: a value's reader is
*strict*, for it the broken connection is the store's outage (``StoreUnavailable``), as
on the pool's; a stream's reader polls on (a lost notification costs one pause).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import psycopg

from simpleworkflow import errors

VALUE_CHANNEL = "simpleworkflow_value"
STREAM_CHANNEL = "simpleworkflow_stream"
#: How often the listening thread looks whether the hub was closed.
TICK = 0.25

#: ``notices(seconds)``: whether a write of the run was heard within that time.
Notices = Callable[[float], bool]
AsyncNotices = Callable[[float], Awaitable[bool]]

_log = logging.getLogger("simpleworkflow.postgres")
_VALUES = "a run's values"
R = TypeVar("R", bound="_Registration")


class _Link:
    """One listening connection and the thread that reads it."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.closing = False


class _Registration:
    """One reader's place in the hub: what wakes it, and whether its link broke."""

    def __init__(self, hub: Hub, key: tuple[str, str], strict: bool) -> None:
        self.hub, self.key, self.strict = hub, key, strict
        self.broken: BaseException | None = None

    def wake(self) -> None:
        raise NotImplementedError

    def _check(self) -> bool:
        """Whether the reader may still wait on the hub; raises for a strict one whose
        connection broke."""
        if self.broken is None:
            return True
        if self.strict:
            raise _unavailable(self.broken)
        return False


class Waiter(_Registration):
    """A reader on a thread: ``wait(seconds)`` returns as soon as its run is written."""

    def __init__(self, hub: Hub, key: tuple[str, str], strict: bool) -> None:
        super().__init__(hub, key, strict)
        self._heard = threading.Event()

    def wake(self) -> None:
        self._heard.set()

    def wait(self, seconds: float) -> bool:
        """Whether the run was written within ``seconds`` (returning as soon as it is)."""
        if not self._check():
            time.sleep(seconds)
            return False
        heard = self._heard.wait(seconds)
        self._heard.clear()  # before the reader's next read, which sees what woke it
        return heard and self._check()

    def close(self) -> None:
        self.hub.leave(self)


class AsyncWaiter(_Registration):
    """:class:`Waiter` for a reader on an event loop."""

    def __init__(self, hub: Hub, key: tuple[str, str], strict: bool) -> None:
        super().__init__(hub, key, strict)
        self._loop = asyncio.get_running_loop()
        self._heard = asyncio.Event()

    def wake(self) -> None:
        with contextlib.suppress(RuntimeError):  # its loop has closed: nobody waits
            self._loop.call_soon_threadsafe(self._heard.set)

    async def wait(self, seconds: float) -> bool:
        if not self._check():
            await asyncio.sleep(seconds)
            return False
        try:
            await asyncio.wait_for(self._heard.wait(), seconds)
            heard = True
        except TimeoutError:
            heard = False
        self._heard.clear()
        return heard and self._check()

    async def close(self) -> None:
        self.hub.leave(self)


class Hub:
    """The listening connection all of one backend's readers share (see the module)."""

    def __init__(self, conninfo: Callable[[], str]) -> None:
        self._conninfo = conninfo
        # ``_lock`` guards the link and the readers, held only briefly (an event loop
        # takes it too); ``_opening`` lets one connect at a time, off any event loop.
        self._lock = threading.Lock()
        self._opening = threading.Lock()
        self._link: _Link | None = None
        self._readers: dict[tuple[str, str], set[_Registration]] = {}

    def waiter(self, channel: str, run_id: str, *, strict: bool = False) -> Waiter:
        """Register a reader of ``run_id``'s writes on ``channel``, listening first."""
        return self._join(Waiter(self, (channel, run_id), strict))

    async def waiter_async(self, channel: str, run_id: str, *, strict: bool = False) -> AsyncWaiter:
        """:meth:`waiter` for a reader on an event loop (connecting off the loop)."""
        waiter = AsyncWaiter(self, (channel, run_id), strict)
        with self._lock:
            if self._link is not None:
                return self._joined(waiter)
        return await asyncio.to_thread(self._join, waiter)

    def leave(self, reader: _Registration) -> None:
        with self._lock:
            readers = self._readers.get(reader.key)
            if readers is not None:
                readers.discard(reader)
                if not readers:
                    del self._readers[reader.key]

    def close(self) -> None:
        """Stop listening; the thread closes the connection within :data:`TICK`."""
        with self._lock:
            if self._link is not None:
                self._link.closing = True
                self._link = None

    def _joined(self, reader: R) -> R:
        self._readers.setdefault(reader.key, set()).add(reader)
        return reader

    def _join(self, reader: R) -> R:
        """Register ``reader`` once the connection listens (opening it if need be)."""
        while True:
            self._open(reader.strict)
            with self._lock:
                if self._link is not None:  # (else it broke meanwhile: open another)
                    return self._joined(reader)

    def _open(self, strict: bool) -> None:
        """Open the listening connection and start its thread, unless they run."""
        with self._opening:
            with self._lock:
                if self._link is not None:
                    return
            with _translated(strict):
                conn = psycopg.connect(self._conninfo(), autocommit=True)
                try:
                    conn.execute(f"listen {VALUE_CHANNEL}; listen {STREAM_CHANNEL}")
                except BaseException:
                    conn.close()
                    raise
            link = _Link(conn)
            with self._lock:
                self._link = link
        thread = threading.Thread(
            target=self._serve, args=(link,), name="simpleworkflow-run-wakeups", daemon=True
        )
        thread.start()

    def _serve(self, link: _Link) -> None:
        """Wake the readers of each notified run until the hub closes or the link breaks."""
        try:
            while not link.closing:
                for note in link.conn.notifies(timeout=TICK):
                    self._deliver((note.channel, note.payload))
        except psycopg.Error as exc:
            _log.debug("the connection readers of runs listen on broke (%s)", exc)
            self._broke(link, exc)
        finally:
            link.conn.close()

    def _deliver(self, key: tuple[str, str]) -> None:
        with self._lock:
            readers = list(self._readers.get(key, ()))
        for reader in readers:
            reader.wake()

    def _broke(self, link: _Link, exc: BaseException) -> None:
        """Tell every reader registered now (strict ones fail, others poll); the next
        reader opens a new connection."""
        if link.closing:  # closed with the client: its readers wait on the next link
            return
        with self._lock:
            if self._link is link:
                self._link = None
            readers = [r for group in self._readers.values() for r in group]
            self._readers.clear()
        for reader in readers:
            reader.broken = exc
            reader.wake()


@contextlib.contextmanager
def listening(hub: Hub, run_id: str) -> Iterator[Notices]:
    """Hear of sets of ``run_id``'s values until the block ends (strict)."""
    waiter = hub.waiter(VALUE_CHANNEL, run_id, strict=True)
    try:
        yield waiter.wait
    finally:
        waiter.close()


@contextlib.asynccontextmanager
async def listening_async(hub: Hub, run_id: str) -> AsyncIterator[AsyncNotices]:
    """:func:`listening`, awaited."""
    waiter = await hub.waiter_async(VALUE_CHANNEL, run_id, strict=True)
    try:
        yield waiter.wait
    finally:
        await waiter.close()


def _unavailable(exc: BaseException) -> errors.StoreUnavailable:
    failure = errors.StoreUnavailable(
        f"lost or could not open the connection that waits for {_VALUES}: {exc}; "
        "check that Postgres is up, then wait again"
    )
    failure.__cause__ = exc
    return failure


@contextlib.contextmanager
def _translated(strict: bool) -> Iterator[None]:
    """For a strict reader, a listening connection that cannot open is the store's outage."""
    try:
        yield
    except psycopg.OperationalError as exc:
        if not strict:
            raise
        raise _unavailable(exc) from exc
