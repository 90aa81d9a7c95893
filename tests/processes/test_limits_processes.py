"""Flow control across worker processes (docs/flow-control.md): what held is read from
the audit trail, whatever the workers believe.

One run of worker processes serves every check: two and four workers (at the same time,
each group on a store of its own, on both stores: four groups) work through one batch of
runs under a key limit and another under a rate limit, and each group's audit trail is
then checked for both limits."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_workers import CliWorkers
from conftest import Store, make_store
from limits_app import KEYED, RATED, STEPPED

from simpleworkflow import Client, Run

#: The events that end a lease.
LEASE_ENDS = ("succeeded", "failed", "retried", "released", "cancelled", "sleeping", "waiting")


def lease_intervals(client: Client, run_id: str) -> list[tuple[int, int]]:
    """``(leased event id, id of the event that ended that lease)`` for each lease the
    run had. Event ids are taken in the order writes happen: a lease that began after
    another ended (its slot given back, committed) has a larger id than that end."""
    intervals, start = [], None
    for event in client.events(run_id):
        if event.event_type == "leased":
            start = event.id
        elif event.event_type in LEASE_ENDS and start is not None:
            intervals.append((start, event.id))
            start = None
    assert start is None, f"{run_id}: a lease never ended"
    return intervals


def test_key_and_rate_limits_hold_across_two_and_four_worker_processes(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Each group's runs are checked as if they had the workers to themselves: the runs of
    one limit only delay the other's, which neither check counts on."""
    stores: dict[str, Store] = {}
    batches: dict[str, tuple[list[Run], list[Run]]] = {}
    for kind in ("sqlite", "postgres"):
        for count in (2, 4):
            where = tmp_path / f"{kind}-{count}"
            where.mkdir()
            stores[f"{kind}-{count}"] = make_store(kind, where, request).migrate()
    options = ("--prefix", "limits.%", "--concurrency", "2")
    with CliWorkers("limits_app:app", tmp_path, *options) as workers:
        for group, store in stores.items():
            with store.client() as client:
                set_limits(client)
            for n in range(int(group.rsplit("-", 1)[1])):
                workers.start(store, f"w-{group}-{n}")
        workers.wait_claiming()
        for group, store in stores.items():
            with store.client() as client:
                batches[group] = start_batches(client)
        for group, store in stores.items():
            with store.client() as client:
                workers.wait_for(finished(client, [r for batch in batches[group] for r in batch]))
    for group, store in stores.items():
        keyed, rated = batches[group]
        with store.client() as client:
            check_key_limit(client, keyed, group)
            check_rate_limit(client, rated, group)


def finished(client: Client, runs: list[Run]) -> Callable[[], bool]:
    """Whether every one of ``runs`` has ended, asked afresh at each call."""
    return lambda: all(client.get(run.id).is_terminal for run in runs)


def set_limits(client: Client) -> None:
    """KEYED: one run at a time per concurrency key; RATED's claims and STEPPED's
    ``ctx.rate_limit`` calls share one limit of ten a second."""
    client.admin.set_runtime(KEYED, "python")
    client.admin.set_concurrency(KEYED, None, per_key=1)
    client.admin.set_runtime(RATED, "python")
    client.admin.set_rate_limit("partner-api", "10/s")
    client.admin.limit_rate(RATED, "partner-api")


def start_batches(client: Client) -> tuple[list[Run], list[Run]]:
    """60 keyed runs over three keys; 30 rated runs and 15 that take the limit in a step."""
    keyed = client.start_many(
        [{"type": KEYED, "concurrency_key": f"customer-{n % 3}"} for n in range(60)]
    )
    rated = client.start_many([(RATED, {})] * 30 + [(STEPPED, {})] * 15)
    return keyed, rated


def check_key_limit(client: Client, runs: list[Run], group: str) -> None:
    """A key limit of one is never exceeded, however many workers claim."""
    by_key: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for run in runs:
        assert client.get(run.id).status.value == "succeeded", group
        by_key[str(run.concurrency_key)] += lease_intervals(client, run.id)
    workers_seen = {e.data.get("worker_id") for r in runs for e in client.events(r.id)}
    assert len(by_key) == 3, group
    for key, intervals in by_key.items():
        intervals.sort()
        overlaps = [(a, b) for a, b in itertools.pairwise(intervals) if b[0] < a[1]]
        assert not overlaps, f"{group} {key}: leases held at once: {overlaps}"
    assert len(workers_seen - {None}) >= 2, group  # claims came from several processes


def check_rate_limit(client: Client, runs: list[Run], group: str) -> None:
    """A rate limit of ten a second holds across workers, shared by the claims of one type
    and the ``ctx.rate_limit`` calls of another's runs."""
    rated = [r for r in runs if r.type == RATED]
    starts = [e.created_at for r in rated for e in client.events(r.id) if e.event_type == "started"]
    steps = [
        s.completed_at
        for r in runs
        if r.type == STEPPED
        for s in client.steps(r.id)
        if s.kind == "rate_limit"
    ]
    throttled = [e.data for r in runs for e in client.events(r.id) if e.event_type == "throttled"]
    assert len(starts) == 30 and len(steps) == 15 and throttled, group
    assert all(client.get(r.id).status.value == "succeeded" for r in runs), group
    # The limit's windows are whole seconds since the epoch, as the claims count them. A
    # take is stamped with its transaction's start: one that began in a window's last
    # instant counts in the next window if another worker opened it first
    # (docs/flow-control.md), so each second's takes must fit their own window or, those
    # over ten, the next one.
    taken = [*starts, *steps]
    per_second = Counter(int(at.timestamp()) for at in taken if at is not None)
    carried = 0
    for second in range(min(per_second), max(per_second) + 2):
        assert carried <= 10, (group, sorted(per_second.items()))
        carried = max(0, carried + per_second[second] - 10)
    span = max(per_second) - min(per_second) + 1
    assert len(taken) <= 10 * span, group
