"""Transactional steps (``ctx.transaction``): a step whose function writes to the store's
own database in the transaction that journals it, so that its writes and its journal
entry commit together.

A plain step's function runs, then its output is journaled in a transaction of its own:
a worker that dies between the two runs it again on the next attempt (at least once).
A transactional step's function gets a connection inside a transaction of the store's;
the step's journal entry is written in that same transaction, fenced by the lease, and
committed with it. The fence reads the run's row under ``FOR SHARE`` (``record_step``),
a lock held until the commit: a rescue or a cancel of the run waits for the commit, or
has already changed the row and the step rolls back. So the writes and their entry are
both there or neither is, whatever instant the worker dies at, and a replay returns the
journaled result without calling the function: exactly once, for what the function
writes through the connection it is given. A failed attempt rolls back everything it
wrote, then is retried as a step is.

The entry does not go through the worker's group commit (``StepJournal``): it must be in
the step's own transaction. A ``def`` function gets a blocking connection and runs on a
thread (the handler's, or the worker's step pool); an ``async def`` one an asynchronous
connection, on the worker's loop. SQLite has no asynchronous connection: ``def`` only,
and while it runs the process's other calls to the file wait (one writer at a time).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import time
from collections.abc import Callable
from typing import Any

from simpleworkflow import errors
from simpleworkflow.backends.records import StepRecord
from simpleworkflow.durable import steps
from simpleworkflow.durable.attempt import AttemptState
from simpleworkflow.durable.kinds import JournalKind
from simpleworkflow.retry import RetryPolicy

#: What a transactional step's function gives back, with the entry journaled beside it.
Committed = tuple[Any, StepRecord]


class Transactional:
    """A transactional step (``ctx.transaction``): its function runs on a connection in a
    transaction of the store's, which also journals its output (see the module's doc)."""

    __slots__ = ("args", "block", "fn", "kwargs", "name", "record", "state")

    def __init__(
        self,
        state: AttemptState,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self.state, self.name, self.fn, self.args, self.kwargs = state, name, fn, args, kwargs
        self.block: contextlib.AbstractAsyncContextManager[Any] | None = None
        self.record: StepRecord | None = None

    def prepare(self, attempt: int) -> None:
        durable = self.state.durable
        self.block = _async_block(self.state, self.fn)
        self.record = durable.entry(self.name, JournalKind.STEP, None, attempt, durable.db_now())

    async def begin_async(self) -> None:
        """Nothing to wait for: it begins inside its transaction (see :func:`_committed`)."""

    def begin_sync(self) -> None:
        """As :meth:`begin_async`."""

    async def call_async(self) -> Any:
        assert self.record is not None
        state, fn, args, kwargs = self.state, self.fn, self.args, self.kwargs
        if self.block is not None:
            value, self.record = await _committed_async(
                state, self.block, self.record, fn, args, kwargs
            )
        else:
            value, self.record = await state.in_thread(
                _committed, state, self.record, fn, args, kwargs
            )
        return value

    def call_sync(self) -> Any:
        """The function on this thread (an ``async def`` one on the worker's loop)."""
        assert self.record is not None
        state, fn, args, kwargs = self.state, self.fn, self.args, self.kwargs
        if self.block is not None:
            value, self.record = state.bridge(
                _committed_async(state, self.block, self.record, fn, args, kwargs)
            )
        else:
            value, self.record = _committed(state, self.record, fn, args, kwargs)
        return value

    @property
    def text(self) -> str | None:
        """The output as its transaction journaled it."""
        return None if self.record is None else self.record.output

    def encode(self, value: Any) -> None:
        """Encoded already: its entry is committed with the function's writes."""

    def journal(self, value: Any) -> None:
        """Journaled already, in the step's transaction: note the entry for later lookups."""
        assert self.record is not None
        self.state.durable.remember(self.record)


def check_policy(retry: RetryPolicy | None) -> None:
    """Refuse a retry policy with a ``timeout``: a transactional step cannot be abandoned.
    Its function's thread would go on and commit its writes with the step's journal entry
    after the step was failed; bound its statements in the database instead (on Postgres,
    ``set local statement_timeout`` on ``conn``)."""
    if retry is not None and retry.timeout is not None:
        raise errors.InvalidArgument(
            "ctx.transaction takes no timeout (its retry policy has one): a late commit "
            "could not be discarded; on Postgres, run `set local statement_timeout = ...` "
            "on the step's connection"
        )


def _async_block(
    state: AttemptState, fn: Callable[..., Any]
) -> contextlib.AbstractAsyncContextManager[Any] | None:
    """The async transaction an ``async def`` function runs in (``None`` for a ``def``);
    made before the step starts, so that a store without one refuses at once rather than
    as a failure of the step, retried."""
    if not inspect.iscoroutinefunction(fn):
        return None
    try:
        return state.durable.backend.transaction_async()
    except errors.InvalidInput as exc:  # the code's own shape: no retry can mend it
        raise state.durable.refuse(exc) from None


def _committed(
    state: AttemptState,
    record: StepRecord,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Committed:
    """Call ``fn`` on a connection in a transaction, journal its output there, commit."""
    durable, backend = state.durable, state.durable.backend
    with backend.transaction() as conn:
        while not steps.may_begin(state):
            # Read in this transaction (a read of the store's own would wait for it).
            began = time.monotonic()
            durable.holding.judge(backend.execute_on(conn, durable.holding.read_op()), began, None)
        with state.observers.around_step(state.run, record.name, record.attempts):
            value = fn(conn, *args, **kwargs)
        record = dataclasses.replace(record, output=durable.encode(record.name, value))
        if not backend.execute_on(conn, durable.journal_op(record)):
            raise errors.LeaseLost(record.name)  # rolls back the step's writes too
    return value, record


async def _committed_async(
    state: AttemptState,
    block: contextlib.AbstractAsyncContextManager[Any],
    record: StepRecord,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Committed:
    """:func:`_committed` for an ``async def`` function, on the worker's loop."""
    durable, backend = state.durable, state.durable.backend
    async with block as conn:
        while not steps.may_begin(state):
            await durable.holding.confirm()
        with state.observers.around_step(state.run, record.name, record.attempts):
            value = await fn(conn, *args, **kwargs)
        record = dataclasses.replace(record, output=durable.encode(record.name, value))
        if not await backend.execute_on_async(conn, durable.journal_op(record)):
            raise errors.LeaseLost(record.name)
    return value, record
