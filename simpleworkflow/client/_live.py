"""What a client reads of a run while it runs: the values it publishes and its streams
(docs/durable.md, "Values a run publishes" and "Streams"), as a base of each client."""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from simpleworkflow import durations, names
from simpleworkflow.backends import op_runner
from simpleworkflow.client import _streams, _values
from simpleworkflow.client._requests import Requests
from simpleworkflow.models import RunValue
from simpleworkflow.models.streams import StreamInfo, StreamItem


class _Typed(Requests):
    """Values and stream items read as a read's ``type=`` says."""

    def _value_as(self, got: RunValue, hint: Any) -> RunValue:
        value = self._read_as(got.value, hint, f"value {got.key!r} of run {got.run_id}")
        return dataclasses.replace(got, value=value)

    def _items_as(self, hint: Any) -> Callable[[StreamItem], StreamItem] | None:
        """How to read each stream item as type ``hint``; ``None`` without one."""
        if hint is None:
            return None
        return lambda item: dataclasses.replace(
            item, value=self._read_as(item.value, hint, f"stream item {item.offset}")
        )


class LiveReads(op_runner.Checked, _Typed):
    """The sync client's reads of values and streams."""

    def values(self, run_id: str) -> builtins.list[RunValue]:
        """The values the run has published (``ctx.set_value``), the last of each key."""
        return self._run(_values.read_all(self.backend, run_id), readonly=True)

    def value(self, run_id: str, key: str, *, type: Any = None) -> RunValue | None:
        """The run's value ``key``, or ``None`` while it has set none. With ``type`` (a
        type hint) its ``value`` is read as that type (docs/payloads.md)."""
        got = self._run(_values.read_one(self.backend, run_id, key), readonly=True)
        return got if type is None or got is None else self._value_as(got, type)

    def wait_value(
        self,
        run_id: str,
        key: str,
        timeout: durations.Duration | None = None,
        *,
        after: int | None = None,
        type: Any = None,
    ) -> RunValue:
        """Block until the run has set value ``key`` (with ``after``: a version newer than
        ``after``, so pass the last one read to wait for the next change); raise
        :class:`~simpleworkflow.errors.WaitTimeout` past ``timeout``, and
        :class:`~simpleworkflow.errors.RunFinished` (its ``status``) as soon as the run has
        ended without such a value. ``type``: read as :meth:`value` does."""
        wait = _values.ValueWait(run_id, key, timeout, after)
        with self.backend.value_notices(wait.run_id) as notices:
            while True:
                got = wait.outcome(self._run(wait.look(self.backend), readonly=True))
                if got is not None:
                    return got if type is None else self._value_as(got, type)
                pause = wait.next_pause(notices is not None)
                if pause is None:
                    raise wait.timed_out()
                _values.sleep_or_hear_sync(notices, pause)

    def read_stream(
        self, run_id: str, key: str, *, after: int | None = None, type: Any = None
    ) -> Iterator[StreamItem]:
        """The items of the run's stream ``key`` after offset ``after`` (``None``: from
        the first), as they are written, until the stream is closed or the run has
        ended. Resume a reading with ``after=`` the last offset seen. With ``type`` (a
        type hint) each item's ``value`` is read as that type (docs/payloads.md)."""
        run_id, key, start = _streams.checked(run_id, key, after)
        read = _streams.reader(self.backend, run_id, key)
        run = lambda op: self._run(op, readonly=True)  # noqa: E731
        waker = lambda: self.backend.stream_waker(run_id)  # noqa: E731
        return _streams.follow(run, read, run_id, start, waker, self._items_as(type))

    def streams(self, run_id: str) -> builtins.list[StreamInfo]:
        """The run's streams: each key, its item count, whether it was closed."""
        run_id = names.normalize_run_id(run_id)
        return self._run(self.backend.of_run(run_id, self.backend.list_streams), readonly=True)

    def stream_items(
        self,
        run_id: str,
        key: str,
        *,
        after: int | None = None,
        limit: int = 100,
        type: Any = None,
    ) -> builtins.list[StreamItem]:
        """Up to ``limit`` items of the stream stored now, after ``after``; no waiting.
        ``type``: read as :meth:`read_stream` does."""
        run_id, key, start = _streams.checked(run_id, key, after)
        page = self._run(self.backend.read_stream(run_id, key, start, limit), readonly=True)
        items = self._found(run_id, page).items
        read = self._items_as(type)
        return items if read is None else [read(item) for item in items]


class AsyncLiveReads(op_runner.AsyncChecked, _Typed):
    """The async client's reads of values and streams."""

    async def values(self, run_id: str) -> builtins.list[RunValue]:
        """The run's values; see :meth:`Client.values`."""
        return await self._run(_values.read_all(self.backend, run_id), readonly=True)

    async def value(self, run_id: str, key: str, *, type: Any = None) -> RunValue | None:
        """The run's value ``key``, or ``None``; see :meth:`Client.value`."""
        got = await self._run(_values.read_one(self.backend, run_id, key), readonly=True)
        return got if type is None or got is None else self._value_as(got, type)

    async def wait_value(
        self,
        run_id: str,
        key: str,
        timeout: durations.Duration | None = None,
        *,
        after: int | None = None,
        type: Any = None,
    ) -> RunValue:
        """Wait until the run has set value ``key``; see :meth:`Client.wait_value`."""
        wait = _values.ValueWait(run_id, key, timeout, after)
        async with self.backend.value_notices_async(wait.run_id) as notices:
            while True:
                got = wait.outcome(await self._run(wait.look(self.backend), readonly=True))
                if got is not None:
                    return got if type is None else self._value_as(got, type)
                pause = wait.next_pause(notices is not None)
                if pause is None:
                    raise wait.timed_out()
                await _values.sleep_or_hear(notices, pause)

    def read_stream(
        self, run_id: str, key: str, *, after: int | None = None, type: Any = None
    ) -> AsyncIterator[StreamItem]:
        """The stream's items as they are written (``async for``); see
        :meth:`Client.read_stream`."""
        run_id, key, start = _streams.checked(run_id, key, after)
        read = _streams.reader(self.backend, run_id, key)
        run = lambda op: self._run(op, readonly=True)  # noqa: E731
        waker = lambda: self.backend.stream_waker_async(run_id)  # noqa: E731
        return _streams.follow_async(run, read, run_id, start, waker, self._items_as(type))

    async def streams(self, run_id: str) -> builtins.list[StreamInfo]:
        """The run's streams; see :meth:`Client.streams`."""
        run_id = names.normalize_run_id(run_id)
        return await self._run(
            self.backend.of_run(run_id, self.backend.list_streams), readonly=True
        )

    async def stream_items(
        self,
        run_id: str,
        key: str,
        *,
        after: int | None = None,
        limit: int = 100,
        type: Any = None,
    ) -> builtins.list[StreamItem]:
        """The stream's items stored now; see :meth:`Client.stream_items`."""
        run_id, key, start = _streams.checked(run_id, key, after)
        page = await self._run(self.backend.read_stream(run_id, key, start, limit), readonly=True)
        items = self._found(run_id, page).items
        read = self._items_as(type)
        return items if read is None else [read(item) for item in items]
