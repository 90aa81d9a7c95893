"""Streams a run writes (``ctx.stream_append``, ``ctx.stream_close``) and readers follow live.

Items are rows of ``workflow_stream_item``, numbered 0, 1, 2 ... per stream in the order
written. Two ways in:

- From the body, outside a step, an append or a close is a durable call: its item is
  inserted, then it is journaled (``stream`` entry ``@stream:<key>``); a replay meets
  the entry and writes nothing.
- From a step's function (an LLM's tokens), appends are buffered and written in batches:
  a write is asked for once :data:`BATCH_ITEMS` items wait, or :data:`BATCH_SECONDS`
  after a batch's first item, and for the rest when the function returns (or raises),
  before the step is journaled: a completed step's items are all stored, and a replay
  does not run it. A write takes whatever waits when its turn comes, so batches grow
  while the database is busy. Appending never waits for the database.

Exactly once: each item carries its origin (the step's or the call's journal name) and
its seq among that origin's items of the stream, unique per run and stream. A step run
again (a retry, or after the worker died mid-step) appends the same seqs, and the store
leaves out those already written: readers never see an item twice, and the first write
of an offset stands. Writes are fenced by the lease, and one attempt's writes go one at a
time, in the order they were made, so offsets follow the order of the appends.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Generator
from typing import Any

from simpleworkflow import errors, names, observe
from simpleworkflow.backends.stream_ops import Append, Appended
from simpleworkflow.durable.attempt import AttemptState
from simpleworkflow.durable.kinds import JournalKind

#: A batch of a step's items is written once it holds this many ...
BATCH_ITEMS = 64
#: ... or this many seconds after its first item was appended; a write takes what has
#: been buffered by its turn, up to this many items.
BATCH_SECONDS = 0.05
MOST_ITEMS = 1000
#: A body's append or close is journaled as ``@stream:<key>`` (numbered when repeated).
PREFIX = "@stream:"

#: The journal name of the step whose function runs in this context, if any.
_in_step: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "simpleworkflow_stream_step", default=None
)


check_key = names.check_stream_key


def closable(key: object) -> str:
    """``key``, checked, when a stream may be closed here: from the body, not a step."""
    key = check_key(key)
    if current_step() is not None:
        raise errors.InvalidArgument(f"close stream {key!r} from the workflow's body, not a step")
    return key


def encode(state: AttemptState, key: str, value: Any) -> str:
    return state.durable.payload(value, f"item of stream {key!r}")


def leaving(token: contextvars.Token[str | None]) -> None:
    _in_step.reset(token)


def current_step() -> str | None:
    return _in_step.get()


class Done:
    """What an append inside a step returns: it is done at once, and may be awaited."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield


DONE = Done()


class Writer:
    """One attempt's stream writes: the steps' buffers, and the writes under way.

    Buffers are filled from any thread; writes run on the worker's loop one at a time,
    in the order they were asked for. A write takes everything its stream's buffer holds
    when its turn comes (up to :data:`MOST_ITEMS`): while the database is busy, batches
    grow, so a fast producer costs fewer transactions rather than a longer queue."""

    def __init__(self, state: AttemptState) -> None:
        self._state = state
        self._loop = state.loop
        self._mutex = threading.Lock()
        self._buffers: dict[tuple[str, str], list[Append]] = {}
        self._seqs: dict[tuple[str, str], int] = {}
        self._asked: set[tuple[str, str]] = set()  # a write asked for, not yet taking
        self._writes: dict[str, list[asyncio.Task[None]]] = {}
        self._turn: asyncio.Lock | None = None
        #: Keys this attempt closed (or met closed in the journal).
        self.closed: set[str] = set()

    # -- from a step's function (any thread) ------------------------------------------

    def begin(self, origin: str) -> None:
        """A step's function starts (again): its items are numbered from 0."""
        with self._mutex:
            for pair in [p for p in self._seqs if p[0] == origin]:
                del self._seqs[pair]

    def buffer(self, origin: str, key: str, text: str) -> Done:
        """Buffer an item of step ``origin``; :data:`DONE` (an append in a step of an async
        body may be awaited)."""
        if key in self.closed:
            raise errors.InvalidArgument(f"stream {key!r} is closed")
        pair = (origin, key)
        with self._mutex:
            seq = self._seqs.get(pair, 0)
            self._seqs[pair] = seq + 1
            items = self._buffers.setdefault(pair, [])
            items.append((seq, text, False))
            count = len(items)
            now = count >= BATCH_ITEMS and pair not in self._asked
            if now:
                self._asked.add(pair)
        if now:
            self._on_loop(self._start, pair)
        elif count == 1:
            self._on_loop(self._start_later, pair)
        return DONE

    def _on_loop(self, fn: Any, *args: Any) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            fn(*args)
        else:
            self._loop.call_soon_threadsafe(fn, *args)

    # -- on the worker's loop ----------------------------------------------------------

    def _start_later(self, pair: tuple[str, str]) -> None:
        self._loop.call_later(BATCH_SECONDS, self._start_if_due, pair)

    def _start_if_due(self, pair: tuple[str, str]) -> None:
        with self._mutex:
            if pair in self._asked or not self._buffers.get(pair):
                return
            self._asked.add(pair)
        self._start(pair)

    def _start(self, pair: tuple[str, str]) -> None:
        task = self._loop.create_task(self._write_buffered(pair))
        task.add_done_callback(_retrieved)
        self._writes.setdefault(pair[0], []).append(task)

    async def _write_buffered(self, pair: tuple[str, str]) -> None:
        async with self._turn_of_writes():
            with self._mutex:
                self._asked.discard(pair)
                items = self._buffers.pop(pair, [])
                if len(items) > MOST_ITEMS:
                    self._buffers[pair], items = items[MOST_ITEMS:], items[:MOST_ITEMS]
                    self._asked.add(pair)
                    self._start(pair)  # the rest, next
            if items:
                await self._append(pair[0], pair[1], items)

    async def finish(self, origin: str) -> None:
        """Write what step ``origin`` has buffered, and wait for all its writes."""
        with self._mutex:
            pairs = [p for p in self._buffers if p[0] == origin and p not in self._asked]
            self._asked.update(pairs)
        for pair in pairs:
            self._start(pair)
        writes = self._writes.get(origin, [])
        while writes:
            await writes.pop(0)
        self._writes.pop(origin, None)

    def pending(self, origin: str) -> bool:
        with self._mutex:
            return origin in self._writes or any(p[0] == origin for p in self._buffers)

    async def write_now(self, origin: str, key: str, items: list[Append]) -> None:
        async with self._turn_of_writes():
            await self._append(origin, key, items)

    def _turn_of_writes(self) -> asyncio.Lock:
        """FIFO: the writes go one at a time, in the order they were asked for."""
        if self._turn is None:
            self._turn = asyncio.Lock()
        return self._turn

    async def _append(self, origin: str, key: str, items: list[Append]) -> None:
        durable, lease = self._state.durable, self._state.lease
        backend = durable.backend
        wrote: Appended = await durable.until_available(
            origin,
            lambda: backend.execute_async(
                backend.append_stream(lease.run.id, lease.token, key, origin, items)
            ),
        )
        if not wrote.held:
            raise errors.LeaseLost(origin)
        if wrote.items and self._state.observers:
            self._tell(origin, key, items, wrote)

    def _tell(self, origin: str, key: str, items: list[Append], wrote: Appended) -> None:
        """The observers, once a batch committed with new items (one a replay or a step
        run again had written already is left out, and says nothing)."""
        state = self._state
        at = state.durable.db_now()
        if items[-1][2]:  # a close, written alone (from the body)
            state.observers.stream_closed(observe.StreamClosed(state.run, key, origin, at))
            return
        assert wrote.first is not None and wrote.last is not None
        event = observe.StreamAppended(
            state.run, key, origin, wrote.items, wrote.first, wrote.last, at
        )
        state.observers.stream_appended(event)


def _retrieved(task: asyncio.Task[None]) -> None:
    """A write's failure is raised by ``finish``; one no step waits for is not logged."""
    if not task.cancelled():
        task.exception()


_making = threading.Lock()


def writer(state: AttemptState) -> Writer:
    """The attempt's writer, made at its first use: a run without streams pays nothing."""
    if state.streams is None:
        with _making:
            if state.streams is None:
                state.streams = Writer(state)
    assert isinstance(state.streams, Writer)
    return state.streams


async def from_body(state: AttemptState, name: str, key: str, text: str | None) -> None:
    """An append (``text``) or a close (``None``) made by the body: a durable call."""
    durable = state.durable
    entry = await durable.begin(name, JournalKind.STREAM, state.is_cancelled())
    out = writer(state)
    if entry is None or entry.status != "completed":
        closing = text is None
        await out.write_now(name, key, [(0, text, closing)])
        await durable.journal(name, JournalKind.STREAM, {"key": key, "closed": closing}, events=[])
    if text is None:
        out.closed.add(key)


def starting(state: AttemptState, name: str) -> contextvars.Token[str | None]:
    """Step ``name``'s function is about to run here: appends go to its buffers."""
    if isinstance(state.streams, Writer):
        state.streams.begin(name)
    return _in_step.set(name)


def finishing(state: AttemptState, name: str) -> Any:
    """The loop's work to finish step ``name``'s stream writes, or ``None``: none."""
    out = state.streams
    if out is None or not isinstance(out, Writer) or not out.pending(name):
        return None
    return out.finish(name)
