"""Recovering the runs of dead workers: noticing expired leases soon, and charging each
crash to the run that caused it.

A lease that expired means its worker died or stalled; the run is due again at once, in
its place in the queue (its ``run_at`` as it was when claimed, so not behind a backlog
that came due meanwhile), not after the retry policy's backoff: a crash is not an error
of the handler. Every worker looks for expired leases of its types at least
every :data:`REAP_POLL` seconds, and wakes up at the next expiry it knows of (the first
among every worker's leases; one taken since runs a whole lease, longer than the second
between looks), so a crashed worker's runs start again about one lease duration after
its last heartbeat.

Which run killed the worker cannot be known when it held several, so none of them is
charged. A first crash beside others costs a run nothing more: it is due again at once,
claimed by any worker like any other run. Its second such crash (counted in
``workflow_run.crashes`` since its last attempt that ended otherwise) makes it a
*suspect* (``workflow_run.isolate``), claimed only by a worker that holds nothing else,
and alone. A suspect's crash is its own, and is charged like a failed attempt; a failure or
a suspension clears the mark and the count (a success leaves them on the finished row,
where nothing reads them: an operator's retry clears them). A run
that kills its worker every time therefore takes its neighbours down twice, then fails
after exactly ``max_attempts`` charged crashes (it runs ``max_attempts + 2`` times), and a
healthy run never pays for another's crashes: one that shared both crashes becomes a
suspect too, runs alone once, and is cleared.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any

from simpleworkflow import errors, observe
from simpleworkflow.backends import Backend
from simpleworkflow.backends.base import Failure
from simpleworkflow.backends.core import read_flag, read_int
from simpleworkflow.durable import execution
from simpleworkflow.errors import plural
from simpleworkflow.models import Unreadable

_log = logging.getLogger("simpleworkflow.worker")

REAP_POLL = 1.0  # seconds between looks for expired leases, at most
RETRY = 0.05  # seconds before looking again at an expired lease no look could recover
BATCH = 100  # expired leases recovered per transaction
SUSPECT_AFTER = 2  # uncharged crashes beside others that make a run a suspect
#: The counts of an expired lease's row that decide what its crash costs (and its
#: ``isolate`` flag).
_COUNTS = ("attempt", "max_attempts", "crashes")


def crashed(row: Mapping[str, Any], recovered_by: str | None = None) -> Failure:
    """What an expired lease (a row of ``expired_leases``) means for its run, recovered
    by the worker ``recovered_by`` (named in the event, for whoever follows a recovery).
    A count it cannot read (text in an integer column, written by hand) fails the run
    for good: the reaper cannot decide without it, and must not die of it."""
    counts = {name: read_int(row[name]) for name in _COUNTS}
    counts["isolate"] = read_flag(row["isolate"])
    spoiled = {name: value for name, value in counts.items() if isinstance(value, Unreadable)}
    if spoiled:
        return execution.unreadable_row(str(row["id"]), row["lease_token"], spoiled, recovered_by)
    charged = bool(row["isolate"])  # it ran alone: the crash was its own
    crashes = row["crashes"] + (0 if charged else 1)  # uncharged ones, beside others
    failures = row["attempt"] + (1 if charged else 0)
    final = charged and failures >= row["max_attempts"]
    suspect = not final and (charged or crashes >= SUSPECT_AFTER)
    message = (
        f"lease expired: worker {row['leased_by']} stopped renewing it "
        "(it crashed, was killed, or stalled)"
    )
    token = row["lease_token"]
    return Failure(
        run_id=str(row["id"]),
        token=None if token is None else str(token),
        final=final,
        delay=0.0,
        error=message,
        data={
            "reason": "lease_expired",
            "worker_id": row["leased_by"],
            **({} if recovered_by is None else {"recovered_by": recovered_by}),
            "charged": charged,
            "crashes": crashes,
            "suspect": suspect,
            "error": {"type": "LeaseExpired", "message": message},
        },
        charged=charged,
        suspect=suspect,
        crashes=crashes,
        keep_place=True,
    )


async def reap(
    backend: Backend,
    types: list[str],
    runtime: str,
    on_recovered: Callable[[list[Failure]], None],
    worker_id: str | None = None,
) -> None:
    """Recover expired leases of ``types`` until cancelled, as the worker ``worker_id``;
    ``on_recovered`` hears of each batch recorded (to set a timer for when the runs are
    due)."""
    misses = 0  # looks in a row that saw an expired lease and could recover none of it
    while True:
        try:
            due_in, recovered = await look(backend, types, runtime, worker_id)
        except errors.StoreUnavailable as exc:
            _log.warning("looking for expired leases failed (%s)", exc)
            due_in, recovered = None, []
        if recovered:
            _log.info("recovered %s whose lease expired", plural(len(recovered), "run"))
            on_recovered(recovered)
            misses = 0
            continue
        expired = due_in is not None and due_in <= 0
        await asyncio.sleep(pause(due_in, misses))
        misses = misses + 1 if expired else 0


async def look(
    backend: Backend, types: list[str], runtime: str, worker_id: str | None = None
) -> tuple[float | None, list[Failure]]:
    """Seconds until the next lease expires; when one has, recover a batch. A read
    first: recovering takes SQLite's write lock, which every second would be a waste."""
    op = backend.next_lease_expiry(types, runtime)
    due_in = await backend.execute_async(op, readonly=True)
    if due_in is None or due_in > 0:
        return due_in, []
    decide = functools.partial(crashed, recovered_by=worker_id)
    op_reap = backend.reap_expired(types, BATCH, decide, runtime)
    return due_in, await backend.execute_async(op_reap)


async def report_unreadable(
    backend: Backend, observers: observe.Observer, worker_id: str, failures: list[Failure]
) -> None:
    """Tell ``observers`` of the runs a look failed for good as unreadable (see
    :func:`crashed`) as of any attempt that failed for good, as the claim does, so that
    metrics count them. Each run is read back: one statement for each such run, rare."""
    for failure in failures:
        try:
            run = await backend.execute_async(backend.get_run(failure.run_id), readonly=True)
        except Exception:
            _log.exception("run %s: could not read it back for the observers", failure.run_id)
            continue
        if run is not None:
            error = failure.data["error"]["message"]
            finished = observe.AttemptFinished(run, worker_id, observe.FAILED, 0.0, error=error)
            observers.attempt_finished(finished)


def pause(next_expiry: float | None, misses: int = 0) -> float:
    """Seconds until the next look: at the next known expiry, and at least every
    :data:`REAP_POLL` seconds, since other workers take new leases all the time.

    A lease that has expired but that the look could not recover (``misses`` looks in a
    row before this one) is looked at again soon: its row was locked, by another reaper
    recording it or by a transaction of the worker that held it (stalled inside it), and
    a second's wait for that would be a second added to the run's recovery. Then less
    and less often (doubling from :data:`RETRY`), should the lock stay."""
    if next_expiry is None:
        return REAP_POLL
    if next_expiry <= 0:
        return min(RETRY * 2.0**misses, REAP_POLL)
    return min(next_expiry + 0.01, REAP_POLL)
