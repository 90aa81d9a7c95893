"""Racing schedulers in real processes, on both stores: two and four worker processes
(all at the same time, each group on a store of its own: four groups, one run of 30
seconds) run the scheduler over 30 ticks of a schedule that ticks every second, and each
tick starts exactly one run. Counted from the database (the runs keyed by the schedule),
not from what the workers say."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
from cli_workers import CliWorkers
from conftest import Store, make_store
from schedule_app import SCHEDULE, TICK_TYPE
from test_schedules import scheduled_runs

TICKS = 30


def test_two_and_four_worker_processes_start_each_tick_once(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    stores: dict[tuple[str, int], Store] = {}
    for kind in ("sqlite", "postgres"):
        for count in (2, 4):
            where = tmp_path / f"{kind}-{count}"
            where.mkdir()
            stores[kind, count] = make_store(kind, where, request).migrate()
    with CliWorkers("schedule_app:app", tmp_path) as workers:
        for (kind, count), where in stores.items():
            for n in range(count):
                workers.start(where, f"w-{kind}-{count}-{n}")
        workers.wait_for(
            lambda: min(len(scheduled_runs(where, SCHEDULE)) for where in stores.values()) > TICKS,
            timeout=TICKS + 30,
            interval=0.5,
        )
        for where in stores.values():
            with where.client() as client:
                client.schedules.pause(SCHEDULE)
    for group, where in stores.items():
        runs = scheduled_runs(where, SCHEDULE)
        keys = [key for _, key, _ in runs]
        ticks = sorted({datetime.fromisoformat(p["scheduled_for"]) for _, _, p in runs})
        assert len(keys) == len(set(keys)) == len(ticks) > TICKS, group
        assert {t for t, _, _ in runs} == {TICK_TYPE}
        first = ticks[0]
        window = [first + timedelta(seconds=s) for s in range(TICKS)]
        assert ticks[:TICKS] == window, f"{group}: a tick was left without a run"
        assert ticks == [first + timedelta(seconds=s) for s in range(len(ticks))], group
        assert where.count() == len(runs), group  # no other run was started
