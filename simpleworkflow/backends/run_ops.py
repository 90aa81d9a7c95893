"""Producer verbs: start, read, list, cancel, delete and signal runs."""

from __future__ import annotations

import dataclasses
import itertools
import json
import operator
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TypeVar

from simpleworkflow import errors, names
from simpleworkflow.backends.core import StoreCore
from simpleworkflow.backends.ops import ATOMIC, Op, Rows, Statement, Stream
from simpleworkflow.backends.records import CancelledRuns, NewRun, RunQuery
from simpleworkflow.models import Event, Run, Signal, SignalSent

T = TypeVar("T")

#: Runs per statement when create_runs streams a large batch.
CHUNK = 200
#: The first chunk is small, so that the server starts inserting sooner.
FIRST_CHUNK = 50


class RunOps(StoreCore):
    def create_run(self, new: NewRun) -> Op[Run]:
        """Insert a run (its ``created`` event comes with it); on a known key, return the
        run that holds the key and write nothing, or raise
        :class:`~simpleworkflow.errors.IdempotencyConflict` if it is of another type."""
        if new.debounce_key is not None:
            return (yield from self._debounce_run(new))
        run_id = names.new_run_id()
        rows = yield self.stmt("create_run", id=run_id, **new.params())
        if rows:
            return self.created_run(run_id, new, rows[0])
        return _found(new, (yield from self._existing_by_key(new)))

    def create_runs(self, news: Iterable[tuple[str, NewRun]]) -> Op[list[Run]]:
        """Insert many runs, ``(new id, request)`` each, in one transaction; return the
        runs in request order, the existing run for each key already taken (a key held by
        a run of another type raises ``IdempotencyConflict``, and nothing is stored).

        A large batch goes as several statements of ``CHUNK`` runs (the first of
        ``FIRST_CHUNK``), streamed: on Postgres the next chunk is checked and encoded, and
        the last one's rows decoded, while the server inserts. ``news`` is read only as
        each chunk is built.
        """
        pending = iter(news)
        head = list(itertools.islice(pending, CHUNK + 1))
        requests: dict[str, NewRun] = {}
        by_id: dict[str, Run] = {}

        def take(rows: Rows) -> None:
            for row in rows:  # a group of runs that share its values, their ids joined
                ids = row["ids"].split(",")
                news = [requests[run_id] for run_id in ids]
                # the payloads in one parse: far cheaper than one json.loads per run
                parsed = json.loads(f"[{','.join(new.payload for new in news)}]")
                by_id.update(zip(ids, self.created_runs(ids, news, row, parsed), strict=True))

        def chunk(batch: list[tuple[str, NewRun]]) -> Statement:
            requests.update(batch)
            items = ",".join([_item(run_id, new) for run_id, new in _in_key_order(batch)])
            return self.stmt("create_runs", items=f"[{items}]")

        if len(head) <= CHUNK:
            if any(new.idempotency_key is not None for _, new in head):
                yield ATOMIC  # a conflict found after the insert must undo it
            take((yield chunk(head)))
        else:
            yield ATOMIC  # all or nothing, as one statement would be
            rest = itertools.chain(head, pending)
            first = list(itertools.islice(rest, FIRST_CHUNK))
            chunks = itertools.chain([first], iter(lambda: list(itertools.islice(rest, CHUNK)), []))
            yield Stream("-- create_runs, chunked", statements=map(chunk, chunks), take=take)
        ordered = list(requests.items())
        missing = [new.idempotency_key for run_id, new in ordered if run_id not in by_id]
        by_key: dict[str | None, Run] = {}
        if missing:
            found = yield self.stmt("get_runs_by_keys", keys=missing)
            by_key = {row["idempotency_key"]: self.run_from_row(row) for row in found}
        runs = []
        for run_id, new in ordered:
            created = by_id.get(run_id)
            if created is not None:
                runs.append(created)
                continue
            run = by_key.get(new.idempotency_key)
            if run is None:
                raise errors.StoreUnavailable(
                    f"a run with idempotency key {new.idempotency_key!r} vanished while "
                    "being read; retry the call"
                )
            runs.append(_found(new, run))
        return runs

    def _debounce_run(self, new: NewRun) -> Op[Run]:
        """Insert the debounced run, or update the pending run of its key in place: the
        run returned carries this call's payload and options either way, and ``created``
        says which it was (the store returns the run's own id when it absorbed the call).
        """
        run_id = names.new_run_id()
        rows = yield self.stmt("debounce_run", id=run_id, **new.params())
        row = rows[0]
        absorbed = str(row["id"]) != run_id
        if absorbed:
            yield from self.then("debounce_run", **{**new.params(), "id": row["id"]})
        run = self.created_run(str(row["id"]), new, row)
        return dataclasses.replace(run, created=False) if absorbed else run

    def _existing_by_key(self, new: NewRun) -> Op[Run]:
        rows = yield self.stmt("get_run_by_key", idempotency_key=new.idempotency_key)
        if not rows:  # the conflicting row was deleted by retention between two statements
            raise errors.StoreUnavailable(
                f"a run with idempotency key {new.idempotency_key!r} vanished while being "
                "read; retry the call"
            )
        return self.run_from_row(rows[0])

    def get_run(self, run_id: str) -> Op[Run | None]:
        rows = yield self.stmt("get_run", id=run_id)
        return self.run_from_row(rows[0]) if rows else None

    def list_runs(self, query: RunQuery) -> Op[list[Run]]:
        # A statement of its own when filtering by payload, so that the filter stands
        # alone where the planner can serve it from the payload index (Postgres).
        containing = (
            {} if query.payload_contains is None else {"payload_contains": query.payload_contains}
        )
        rows = yield self.stmt(
            "list_runs_containing" if containing else "list_runs",
            type_like=query.type_like,
            filtered=bool(query.statuses or query.waits or query.retrying),
            statuses=list(query.statuses or ()),
            waits=list(query.waits or ()),
            retrying=query.retrying,
            created_after=query.created_after,
            created_before=query.created_before,
            include_deleted=query.include_deleted,
            after_created_at=query.after_created_at,
            after_id=query.after_id,
            limit=query.limit,
            **containing,
        )
        return [self.run_from_row(row) for row in rows]

    def cancel_run(self, run_id: str, reason: str | None) -> Op[tuple[CancelledRuns, Run] | None]:
        """Cancel a pending or leased run and its unfinished descendants, and read the
        run as the cancel left it, in the same transaction.

        Returns the ids cancelled (none: the run had already finished) and whether one
        was leased, with the run; ``None`` when there is no such run.
        """
        data = json.dumps({"reason": reason} if reason else {})
        rows = yield self.stmt("cancel_run", id=run_id, data=data)
        cancelled = [str(row["id"]) for row in rows]
        if cancelled:
            yield from self.then("cancel_run", id=run_id, ids=cancelled, data=data)
        # The cancelled row as the statement left it; a run it did not change (finished,
        # or none) is read by a statement of its own, which sees what committed since.
        own = next((row for row in rows if str(row["id"]) == run_id), None)
        run = self.run_from_row(own) if own is not None else (yield from self.get_run(run_id))
        if run is None:
            return None
        return CancelledRuns(cancelled, any(row["leased"] for row in rows)), run

    def delete_run(self, run_id: str) -> Op[bool | None]:
        """Soft-delete a run, with its ``deleted`` event. ``None``: no such run;
        ``False``: already deleted."""
        rows = yield self.stmt("delete_run", id=run_id)
        if not rows:
            return False if (yield from self._exists(run_id)) else None
        yield from self.then("delete_run", id=run_id)
        return True

    def of_run(self, run_id: str, read: Callable[[str], Op[T]]) -> Op[T]:
        """``read(run_id)`` in the same transaction as the check that the run exists;
        :class:`~simpleworkflow.errors.RunNotFound` when it does not."""
        if not (yield from self._exists(run_id)):
            raise errors.RunNotFound(run_id)
        return (yield from read(run_id))

    def _exists(self, run_id: str) -> Op[bool]:
        rows = yield self.stmt("get_run", id=run_id)
        return bool(rows)

    def list_events(self, run_id: str) -> Op[list[Event]]:
        rows = yield self.stmt("list_events", id=run_id)
        return [self.event_from_row(row) for row in rows]

    def list_signals(self, run_id: str) -> Op[list[Signal]]:
        """The run's signals, oldest first: those a wait consumed, and those still stored."""
        rows = yield self.stmt("list_signals", id=run_id)
        return [
            Signal(
                id=int(row["id"]),
                run_id=str(row["run_id"]),
                event=row["event"],
                payload=self.read_json(row["payload"]),
                created_at=self.read_time(row["created_at"]),
                consumed_at=self.read_time(row["consumed_at"]),
                step_name=row["step_name"],
            )
            for row in rows
        ]

    def send_signal(self, run_id: str, event: str, payload: str) -> Op[SignalSent | str | None]:
        """Store a signal for a run and wake it if it waits for one like it.

        Returns what was done, the run's status when it has already finished, or ``None``
        when there is no such run. The run row is locked first, so that a run suspending
        at the same moment sees the signal (see ``wake_suspended``).
        """
        yield ATOMIC
        rows = yield self.stmt("lock_run", id=run_id)
        if not rows:
            return None
        status = rows[0]["status"]
        if status not in ("pending", "leased"):
            return str(status)
        rows = yield self.stmt("insert_signal", id=run_id, event=event, payload=payload)
        signal_id = int(rows[0]["id"])
        yield from self.then("insert_signal", id=run_id, event=event, ids=[signal_id])
        woke = yield self.stmt("wake_for_signal", id=run_id, event=event, payload=payload)
        return SignalSent(signal_id=signal_id, woke=bool(woke))


def _found(new: NewRun, run: Run) -> Run:
    """The run found under ``new``'s key, if it is of the type asked for."""
    if run.type != new.type:
        assert new.idempotency_key is not None
        raise errors.IdempotencyConflict(new.idempotency_key, run.id, run.type, new.type)
    return dataclasses.replace(run, created=False)


def _in_key_order(batch: list[tuple[str, NewRun]]) -> list[tuple[str, NewRun]]:
    """A batch with concurrency keys, in key order: Postgres creates a new key's counter
    as its row goes in, so batches that bring the same new keys take them in one order
    and never wait for each other in a cycle. Rows are matched to requests by id."""
    if all(new.concurrency_key is None for _, new in batch):
        return batch
    return sorted(batch, key=lambda request: (request[1].type, request[1].concurrency_key or ""))


def _item(run_id: str, new: NewRun) -> str:
    """One run of a ``create_runs`` batch, as JSON; options left out are read as null."""
    if _options_of(new) == _DEFAULT_OPTIONS:  # the common request: one look at them all
        # written out directly: a third of what building a dict and dumping it costs
        head = f'{{"id":{_quoted(run_id)},"type":{_quoted(new.type)}'
        return f'{head},"payload":{_quoted(new.payload)}{_DEFAULT_TAIL}'
    item: dict[str, object] = {"id": run_id, "type": new.type, "payload": new.payload}
    for name in _OPTION_FIELDS:
        value = getattr(new, name)
        if value is not None:
            item[name] = value.isoformat() if isinstance(value, datetime) else value
    return json.dumps(item)


#: The fields of a ``NewRun`` besides its type and payload, which every item has.
_OPTION_FIELDS = tuple(
    field.name for field in dataclasses.fields(NewRun) if field.name not in ("type", "payload")
)
_options_of = operator.attrgetter(*_OPTION_FIELDS)
#: A request's options when it names none, and what its item holds of them.
_DEFAULT_OPTIONS = _options_of(NewRun(type="", payload=""))
_DEFAULT_TAIL = (
    "".join(
        f",{json.dumps(name)}:{json.dumps(value)}"
        for name, value in zip(_OPTION_FIELDS, _DEFAULT_OPTIONS, strict=True)
        if value is not None
    )
    + "}"
)
#: Text as a JSON string (the C function json.dumps uses for it).
_quoted = json.encoder.encode_basestring_ascii
