"""Durable execution in-process, on both stores: journaled steps, sleeps, signals, children.

Each test runs an :class:`IntentPoller` on a thread of its own against a real store, with
workflow bodies defined in the test. Step bodies note every execution in a ledger kept
by the test, outside the engine, so that "ran once" is checked against what really ran
rather than against what the engine says it did.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import threading
import time
import types
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from conftest import Store, poller_thread
from worker_app import wait_until

from simpleworkflow import Client, Context, RunStatus, errors
from simpleworkflow.admin import replaycheck
from simpleworkflow.app import App
from simpleworkflow.backends import Backend
from simpleworkflow.backends.records import Claim, Lease, StepRecord
from simpleworkflow.durable import execution
from simpleworkflow.durable.attempt import AttemptState
from simpleworkflow.durable.journal import Durable
from simpleworkflow.durable.journal_batches import StepJournal
from simpleworkflow.models import Run
from simpleworkflow.retry import RetryPolicy
from simpleworkflow.worker import IntentPoller

QUICK = RetryPolicy(backoff="fixed", base=0.2, jitter=0)


class Ledger:
    """Executions as the step bodies report them: a count per key, and the values seen."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: collections.Counter[str] = collections.Counter()
        self.seen: list[tuple[str, Any]] = []

    def note(self, key: str, value: Any = None) -> Any:
        """Count one execution of ``key``; return ``value`` (so a step can return it)."""
        with self._lock:
            self.counts[key] += 1
            self.seen.append((key, value))
        return value

    def count(self, key: str) -> int:
        with self._lock:
            return self.counts[key]

    def values(self, key: str) -> list[Any]:
        with self._lock:
            return [value for k, value in self.seen if k == key]


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture
def app(store: Store) -> App:
    return App(store.url, schema=store.schema, retry=QUICK)


def working(app: App, **options: Any) -> contextlib.AbstractContextManager[IntentPoller]:
    """A poller for ``app`` on a thread for the length of a ``with`` block."""
    return poller_thread(app, **{"type_prefixes": ["test.%"], "poll_interval": 0.1, **options})


def lifecycle(client: Client, run_id: str) -> list[str]:
    return [e.event_type for e in client.events(run_id) if e.event_type != "heartbeat"]


def wait_terminal(client: Client, run_id: str, timeout: float = 20) -> Run:
    def describe() -> str:
        run = client.get(run_id)
        return (
            f"run is {run.status} (waiting for {run.waiting_for}) after events "
            f"{lifecycle(client, run_id)}; last error: {run.last_error}"
        )

    wait_until(lambda: client.get(run_id).is_terminal, timeout, describe)
    return client.get(run_id)


def wait_suspended(client: Client, run_id: str, kind: str, timeout: float = 15) -> Run:
    """Wait until the run is pending and waits for ``kind`` ("sleep", "signal", "child"),
    alone or among other waits (``{"kind": "any", "waits": [...]}``)."""

    def suspended() -> bool:
        run = client.get(run_id)
        waiting = run.waiting_for if isinstance(run.waiting_for, dict) else {}
        waits = waiting.get("waits", [waiting]) if waiting.get("kind") == "any" else [waiting]
        return run.status is RunStatus.PENDING and any(w.get("kind") == kind for w in waits)

    def describe() -> str:
        run = client.get(run_id)
        return f"run is {run.status}, waiting for {run.waiting_for}: {lifecycle(client, run_id)}"

    wait_until(suspended, timeout, describe)
    return client.get(run_id)


def held(client: Client, run_id: str, seconds: float) -> Run:
    """Check for ``seconds`` that the run's status and result do not change; return it."""
    before = client.get(run_id)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        now = client.get(run_id)
        assert (now.status, now.result) == (before.status, before.result), (
            f"run changed from {before.status} to {now.status}: {lifecycle(client, run_id)}"
        )
        time.sleep(0.1)
    return before


def journal(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The run's journal rows in order, as plain dicts."""
    rows = store.sql(
        "select step_name, kind, status, attempts, output from workflow_step "
        "where run_id = ? order by position",
        run_id,
    )
    return [
        {
            "name": name,
            "kind": kind,
            "status": status,
            "attempts": attempts,
            # Postgres hands jsonb over parsed, SQLite as text.
            "output": json.loads(out) if store.kind == "sqlite" and out is not None else out,
        }
        for name, kind, status, attempts, out in rows
    ]


def as_time(value: Any) -> datetime:
    """A timestamp column as an aware datetime (SQLite stores UTC text)."""
    if isinstance(value, datetime):
        return value
    parsed = datetime.fromisoformat(str(value).replace(" ", "T"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


# -- steps and replay --------------------------------------------------------------------


def test_steps_in_a_loop_are_numbered_and_each_runs_once_across_resumes(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.durable.loop.v1")
    def body(payload: Any, ctx: Context) -> Any:
        totals, total = [], 0
        for i in range(3):
            total = ctx.step("add", ledger.note, f"add-{i}", total + i + 1)
            totals.append(total)
            ctx.sleep("tick", 0.1)  # each iteration ends in a suspension
        return totals

    run_id = client.start("test.durable.loop.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == [1, 3, 6]
    assert [ledger.count(f"add-{i}") for i in range(3)] == [1, 1, 1]
    names = ["add", "tick", "add#2", "tick#2", "add#3", "tick#3"]
    assert [s["name"] for s in journal(store, run_id)] == names
    assert lifecycle(client, run_id).count("resumed") == 3


def test_steps_of_many_runs_are_journaled_together_each_fenced_by_its_lease(
    store: Store, client: Client
) -> None:
    """The worker's group commit of journal entries: one batch, any runs, each checked."""
    ids = [client.start("test.batch.v1", {"n": n}).id for n in range(3)]
    backend: Backend = store.backend()
    try:
        claim = Claim(worker_id="w", types=("test.batch.v1",), limit=3, lease_seconds=30)
        leases = {lease.run.id: lease for lease in backend.execute(backend.claim(claim))}
        first, second, lost = (leases[run_id] for run_id in ids)

        def record(lease: Lease, name: str, status: str = "completed", token: str = "") -> Any:
            events = [{"type": "step_completed", "data": {"step": name}}]
            return StepRecord(
                lease.run.id, token or lease.token, name, "step", 0, json.dumps(name), 1,
                status=status, events=events,
            )  # fmt: skip

        batch = [
            record(first, "a"),
            record(first, "b", status="retrying"),
            record(second, "a"),
            record(lost, "a", token="00000000-0000-4000-8000-000000000000"),
        ]
        assert backend.execute(backend.record_steps(batch)) == {
            (first.run.id, "a"),
            (first.run.id, "b"),
            (second.run.id, "a"),
        }
        # A retrying entry is completed by a later batch; a completed one is never changed.
        later = [record(first, "b"), record(second, "a", status="retrying")]
        assert backend.execute(backend.record_steps(later)) == {(first.run.id, "b")}
    finally:
        backend.close()
    assert [(s.step_name, s.status) for s in client.steps(ids[0])] == [
        ("a", "completed"),
        ("b", "completed"),
    ]
    assert [(s.step_name, s.status) for s in client.steps(ids[1])] == [("a", "completed")]
    assert client.steps(ids[2]) == []
    completed = [e.data["step"] for e in client.events(ids[0]) if e.event_type == "step_completed"]
    assert completed == ["a", "b", "b"]
    assert [e.event_type for e in client.events(ids[2])] == ["created", "leased", "started"]


def test_a_batch_queued_behind_a_write_is_sent_before_the_first_batch_s_callers_go_on(
    store: Store, client: Client
) -> None:
    """Group commit: callers whose entries were written go on only after the writer has
    started the next batch's write (a store call yields to the loop before it sends, as
    the ``sleep(0)`` below does), so that the next batch does not wait behind what those
    callers do next. Every caller still learns that its entry counted."""
    for n in range(3):
        client.start("test.batch.v1", {"n": n})
    backend: Backend = store.backend()
    log: list[tuple[str, int]] = []
    first_run: list[str] = []

    class Journal(StepJournal):
        async def write(self, items: list[StepRecord]) -> set[Any]:
            await asyncio.sleep(0)  # as a store call's own task does before it sends
            log.append(("sent", len(items)))
            return await super().write(items)

    async def scenario() -> list[bool]:
        journal = Journal(backend)
        writer = asyncio.create_task(journal.run())
        claim = Claim(worker_id="w", types=("test.batch.v1",), limit=3, lease_seconds=30)
        leases = await backend.execute_async(backend.claim(claim))

        async def step(lease: Lease, name: str) -> bool:
            entry = StepRecord(lease.run.id, lease.token, name, "step", 0, '"x"', 1, events=[])
            counted = await journal.record(entry)
            log.append(("answered", len(log)))
            return counted

        first_run.append(leases[0].run.id)
        try:
            first = asyncio.create_task(step(leases[0], "a"))
            while not log:  # the first batch is being written
                await asyncio.sleep(0)
            rest = [asyncio.create_task(step(lease, "b")) for lease in leases]
            return await asyncio.gather(first, *rest)
        finally:
            writer.cancel()
            await backend.aclose()

    try:
        answers = asyncio.run(scenario())
    finally:
        backend.close()
    assert answers == [True, True, True, True]
    assert [kind for kind, _ in log[:3]] == ["sent", "sent", "answered"]
    assert [(s.step_name, s.status) for s in client.steps(first_run[0])] == [
        ("a", "completed"),
        ("b", "completed"),
    ]


# -- parallel steps: gather and race -----------------------------------------------------


def test_gather_of_ten_steps_journals_each_once_and_replays_them(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    async def square(i: int) -> int:
        ledger.note(f"square-{i}")
        await asyncio.sleep(0.01 * (10 - i))  # finish in the reverse order of the calls
        return i * i

    @app.workflow("test.durable.gather.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        values = await asyncio.gather(*(ctx.step("square", square, i) for i in range(10)))
        ledger.note("body", list(values))
        await ctx.sleep("pause", 0.3)
        return {"values": values}

    run_id = client.start("test.durable.gather.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    squares = [i * i for i in range(10)]
    assert run.result == {"values": squares}
    assert {i: ledger.count(f"square-{i}") for i in range(10)} == dict.fromkeys(range(10), 1)
    # The body ran twice (before and after the sleep); the replay returned the same list.
    assert ledger.values("body") == [squares, squares]
    steps = journal(store, run_id)
    expected_names = ["square"] + [f"square#{n}" for n in range(2, 11)]
    assert sorted(s["name"] for s in steps if s["kind"] == "step") == sorted(expected_names)
    by_name = {s["name"]: s for s in steps}
    assert [by_name[n]["output"] for n in expected_names] == squares
    assert all(s["status"] == "completed" and s["attempts"] == 1 for s in steps)
    events = lifecycle(client, run_id)
    assert events.count("step_completed") == 10
    assert events.count("resumed") == 1


def test_race_winner_is_journaled_and_replayed_without_running_branches(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    async def fast() -> str:
        ledger.note("fast")
        await asyncio.sleep(0.05)
        return "fast won"

    async def slow() -> str:
        ledger.note("slow")
        await _sleep_until_cancelled(ledger.note, "slow cancelled")
        return "slow won"

    @app.workflow("test.durable.race.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        index, value = await ctx.race("first", ctx.step("slow", slow), ctx.step("fast", fast))
        ledger.note("body", [index, value])
        await ctx.sleep("pause", 0.3)
        return {"index": index, "value": value}

    run_id = client.start("test.durable.race.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == {"index": 1, "value": "fast won"}
    assert ledger.values("body") == [[1, "fast won"], [1, "fast won"]]
    assert (ledger.count("fast"), ledger.count("slow"), ledger.count("slow cancelled")) == (1, 1, 1)
    steps = {s["name"]: s for s in journal(store, run_id)}
    assert steps["first"]["kind"] == "race"
    assert steps["first"]["output"]["winner"] == 1
    assert steps["first"]["output"]["value"] == "fast won"
    assert steps["fast"]["status"] == "completed"
    assert "slow" not in steps, "the cancelled branch was journaled"
    assert lifecycle(client, run_id).count("resumed") == 1


def test_a_race_whose_branches_suspend_resumes_with_the_first_to_finish(
    store: Store, app: App, client: Client
) -> None:
    @app.workflow("test.durable.racetimer.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        reply = ctx.wait_for_event("reply", event="reply")
        index, value = await ctx.race("reply or timer", reply, ctx.sleep("timer", 1.0))
        return {"index": index, "value": value}

    run_id = client.start("test.durable.racetimer.v1").id
    with working(app):
        wait_suspended(client, run_id, "sleep")
        backend = store.backend()
        try:
            [report] = asyncio.run(replaycheck.check_runs(app, backend))
        finally:
            backend.close()
        assert (report.run_id, report.verdict) == (run_id, replaycheck.OK), report.detail
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == {"index": 1, "value": None}
    steps = {s["name"]: s for s in journal(store, run_id)}
    assert steps["reply or timer"]["output"]["winner"] == 1


def test_a_branch_that_finishes_wins_over_one_that_waits(
    app: App, client: Client, ledger: Ledger
) -> None:
    async def compute() -> str:
        await asyncio.sleep(0.3)  # the wait beside it has suspended by now
        ledger.note("compute")
        return "computed"

    @app.workflow("test.durable.racewait.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        reply = ctx.wait_for_event("reply", event="reply")  # no timeout
        index, value = await ctx.race("reply or compute", reply, ctx.step("compute", compute))
        return {"index": index, "value": value}

    run_id = client.start("test.durable.racewait.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == {"index": 1, "value": "computed"}
    assert ledger.count("compute") == 1
    events = lifecycle(client, run_id)
    assert "waiting" not in events and "resumed" not in events, events


def test_gather_with_a_retrying_branch_replays_its_journaled_siblings(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    def part(i: int) -> int:
        ledger.note(f"part-{i}")
        if i == 3 and ledger.count("part-3") == 1:
            raise ConnectionError("first try of part 3")
        return i

    policy = RetryPolicy(backoff="fixed", base=0.1, jitter=0, max_attempts=3)

    @app.workflow("test.durable.gatherflaky.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        return await asyncio.gather(*(ctx.step("part", part, i, retry=policy) for i in range(6)))

    run_id = client.start("test.durable.gatherflaky.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    # The replay after part 3's backoff starts all six again at once: part 3 must run
    # again and its siblings come from the journal, with no divergence between them.
    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == list(range(6))
    assert [ledger.count(f"part-{i}") for i in range(6)] == [1, 1, 1, 2, 1, 1]


def test_parallel_first_durable_calls_share_one_read_of_the_journal() -> None:
    class SlowJournal:
        """Each read takes longer than the one before, as on a busy store."""

        reads = 0

        def load_journal(self, run_id: str) -> str:
            return run_id

        async def execute_async(self, op: Any, *, readonly: bool = False) -> list[Any]:
            self.reads += 1
            await asyncio.sleep(0.01 * self.reads)
            return []

    async def main() -> list[Any]:
        backend = SlowJournal()
        lease = Lease(run=cast(Run, types.SimpleNamespace(id="r1")), token="t")
        durable = Durable(lease, cast(Backend, backend))
        replays = await asyncio.gather(*(durable.load() for _ in range(3)))
        assert backend.reads == 1
        return replays

    first, *others = asyncio.run(main())
    assert all(replay is first for replay in others)


def test_settling_waits_for_every_durable_call_under_way_even_one_begun_meanwhile() -> None:
    """The attempt settles (its suspension is then complete) only once no call is under
    way: also when the next call begins as the last one ends, before the settle wakes."""
    seen: list[str] = []

    async def main() -> None:
        lease = Lease(run=cast(Run, types.SimpleNamespace(id="r1")), token="t")
        durable = Durable(lease, cast(Backend, None))
        await durable.settle()  # none under way: at once
        first, second = asyncio.Event(), asyncio.Event()

        async def calls() -> None:
            with durable.calling():
                await first.wait()
            with durable.calling():  # begun in the same step as the first ended
                await second.wait()
            seen.append("calls done")

        task = asyncio.ensure_future(calls())
        await asyncio.sleep(0)
        settling = asyncio.ensure_future(durable.settle())
        await asyncio.sleep(0.01)
        assert not settling.done()
        first.set()
        await asyncio.sleep(0.01)
        assert not settling.done()  # the second call is under way
        second.set()
        await asyncio.wait_for(settling, 1)
        seen.append("settled")
        await task

    asyncio.run(main())
    assert seen == ["calls done", "settled"]


async def _sleep_until_cancelled(note: Callable[[str], object], cancelled: str) -> None:
    """Sleep far longer than any test waits; ``note(cancelled)`` if the sleep is cancelled."""
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        note(cancelled)
        raise


def _attempt_of(app: App, run_type: str) -> tuple[Any, AttemptState]:
    """A definition and an attempt of a run of ``run_type`` that needs no store."""
    run = types.SimpleNamespace(
        id="r1", type=run_type, deadline=None, payload=None, attempt=0, max_attempts=1
    )
    lease = Lease(run=cast(Run, run), token="t")
    return app.definitions[run_type], AttemptState(lease, "w", cast(Backend, None))


def test_an_async_handler_stopped_while_it_awaits_is_cancelled_and_the_worker_goes_on() -> None:
    """The handler is awaited in the attempt's own task: a stop cancels the handler, and
    what the worker does after it (writing the outcome) is not cancelled."""
    app = App()  # no store: the attempt alone
    seen: list[str] = []

    @app.workflow("test.durable.stopped.v1")
    async def stopped(payload: Any, ctx: Context) -> str:
        await _sleep_until_cancelled(seen.append, "cancelled")
        return "slept"

    async def main() -> None:
        definition, state = _attempt_of(app, "test.durable.stopped.v1")

        async def run() -> Any:
            outcome = await execution.attempt(definition, state, cast(Any, None))
            await asyncio.sleep(0.01)  # the worker's code after the handler still awaits
            seen.append("after")
            return outcome

        task = asyncio.ensure_future(run())
        await asyncio.sleep(0.01)
        state.request_stop("cancelled")
        assert await asyncio.wait_for(task, 5) is None
        assert not task.cancelled() and task.cancelling() == 0

    asyncio.run(main())
    assert seen == ["cancelled", "after"]


def test_a_stop_asked_inside_an_async_handler_cancels_it_at_its_next_await_only() -> None:
    """A stop asked from the handler's own code (a durable call that finds the run
    cancelled) cancels the handler at its next ``await``; if it returns first, nothing
    of the worker's code after it is cancelled."""
    app = App()  # no store: the attempt alone
    seen: list[str] = []
    states: list[AttemptState] = []

    @app.workflow("test.durable.self.stopped.v1")
    async def awaits(payload: Any, ctx: Context) -> str:
        states[0].request_stop("cancelled")
        await _sleep_until_cancelled(seen.append, "cancelled")
        return "slept"

    @app.workflow("test.durable.self.returns.v1")
    async def returns(payload: Any, ctx: Context) -> str:
        states[0].request_stop("cancelled")
        return "returned"

    async def run(definition: Any, state: AttemptState) -> Any:
        outcome = await execution.attempt(definition, state, cast(Any, None))
        await asyncio.sleep(0.01)
        seen.append("after")
        return outcome

    async def main() -> None:
        for run_type in ("test.durable.self.stopped.v1", "test.durable.self.returns.v1"):
            definition, state = _attempt_of(app, run_type)
            states[:] = [state]
            task = asyncio.ensure_future(run(definition, state))
            outcome = await asyncio.wait_for(task, 5)
            assert not task.cancelled() and task.cancelling() == 0
            seen.append("stopped" if outcome is None else type(outcome).__name__)
            assert state.stop_reason == "cancelled"  # the worker records nothing for it

    asyncio.run(main())
    assert seen == ["cancelled", "after", "stopped", "after", "Success"]


def test_a_signal_sent_while_the_run_is_leased_wakes_it_once_it_suspends(
    store: Store, app: App, client: Client
) -> None:
    run_ids: list[str] = []

    async def send() -> str:
        await asyncio.sleep(0.3)  # the wait beside this step has found nothing by now
        with store.client() as sender:
            return "woke" if sender.signal(run_ids[0], "go", {"n": 1}).woke else "stored"

    @app.workflow("test.durable.window.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        waited = ctx.wait_for_event("go", event="go", timeout="10m")
        got, sent = await asyncio.gather(waited, ctx.step("send", send))
        return {"got": got, "sent": sent}

    run_ids.append(client.start("test.durable.window.v1").id)
    with working(app):
        run = wait_terminal(client, run_ids[0], timeout=15)  # not the 10 minute timeout

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == {"got": {"n": 1}, "sent": "stored"}
    assert lifecycle(client, run_ids[0]).count("resumed") == 1


# -- step retries ------------------------------------------------------------------------


def step_events(client: Client, run_id: str) -> list[tuple[str, Any]]:
    """``(event, attempt)`` of the run's step events, in order."""
    kinds = ("step_failed", "step_deferred", "step_completed")
    return [
        (e.event_type, e.data.get("attempt"))
        for e in client.events(run_id)
        if e.event_type in kinds
    ]


def test_a_flaky_step_is_retried_with_the_run_suspended_until_it_succeeds(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    def flaky() -> str:
        ledger.note("flaky")
        if ledger.count("flaky") < 3:
            raise ConnectionError(f"try {ledger.count('flaky')} failed")
        return "charged"

    policy = RetryPolicy(backoff="fixed", base=0.2, jitter=0, max_attempts=3)

    @app.workflow("test.durable.flaky.v1")
    def body(payload: Any, ctx: Context) -> Any:
        return ctx.step("charge", flaky, retry=policy)

    run_id = client.start("test.durable.flaky.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == "charged"
    assert ledger.count("flaky") == 3
    assert step_events(client, run_id) == [
        ("step_failed", 1),
        ("step_failed", 2),
        ("step_completed", None),
    ]
    failed = [e for e in client.events(run_id) if e.event_type == "step_failed"]
    assert failed[0].data["error"]["message"] == "try 1 failed"
    assert [s["attempts"] for s in journal(store, run_id)] == [3]
    assert run.attempt == 0, "a step's retries are not failures of the run"


def test_a_step_out_of_attempts_fails_the_run_unless_the_body_compensates(
    app: App, client: Client, ledger: Ledger
) -> None:
    def broken(what: str) -> None:
        ledger.note(what)
        raise ValueError(f"{what} is down")

    policy = RetryPolicy(backoff="fixed", base=0.1, jitter=0, max_attempts=2)

    @app.workflow("test.durable.broken.v1")
    def failing(payload: Any, ctx: Context) -> Any:
        ctx.step("ship", broken, "shipping", retry=policy)
        ledger.note("after ship")

    @app.workflow("test.durable.compensated.v1")
    def compensated(payload: Any, ctx: Context) -> Any:
        try:
            ctx.step("ship", broken, "carrier", retry=policy)
        except errors.StepFailed as exc:
            # The replay after this sleep meets 'ship' again: it must fail again, not run.
            ctx.sleep("before refund", 0.2)
            refund = ctx.step("refund", ledger.note, "refund", "refunded")
            return {"failed_step": exc.step, "attempts": exc.attempts, "refund": refund}
        return None

    failing_id = client.start("test.durable.broken.v1").id
    compensated_id = client.start("test.durable.compensated.v1").id
    with working(app):
        failed = wait_terminal(client, failing_id)
        done = wait_terminal(client, compensated_id)

    assert failed.status is RunStatus.FAILED
    assert "StepFailed" in (failed.last_error or "")
    assert "'ship' failed after 2 attempts" in (failed.last_error or "")
    assert failed.attempt == 1, "a step out of attempts fails the run at once"
    assert ledger.count("shipping") == 2
    assert ledger.count("after ship") == 0
    assert step_events(client, failing_id) == [("step_failed", 1), ("step_failed", 2)]

    assert done.status is RunStatus.SUCCEEDED, done.last_error
    assert done.result == {"failed_step": "ship", "attempts": 2, "refund": "refunded"}
    assert (ledger.count("carrier"), ledger.count("refund")) == (2, 1)


def test_retry_after_defers_a_step_without_counting_an_attempt(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    def rate_limited() -> str:
        ledger.note("call")
        if ledger.count("call") <= 2:
            raise errors.RetryAfter(0.2, "slow down")
        return "sent"

    @app.workflow("test.durable.deferred.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        # One attempt only: the deferrals must not use it up.
        return await ctx.step("send", rate_limited, retry=RetryPolicy(max_attempts=1))

    run_id = client.start("test.durable.deferred.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == "sent"
    assert ledger.count("call") == 3
    assert [e for e, _ in step_events(client, run_id)] == [
        "step_deferred",
        "step_deferred",
        "step_completed",
    ]
    assert [s["attempts"] for s in journal(store, run_id)] == [1]


def test_a_permanent_error_in_a_step_fails_the_run_without_retrying(
    app: App, client: Client, ledger: Ledger
) -> None:
    def declined() -> None:
        ledger.note("charge")
        raise errors.PermanentError("card declined")

    @app.workflow("test.durable.declined.v1")
    def body(payload: Any, ctx: Context) -> Any:
        ctx.step("charge", declined)
        ledger.note("after charge")

    run_id = client.start("test.durable.declined.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.FAILED
    assert "card declined" in (run.last_error or "")
    assert (ledger.count("charge"), ledger.count("after charge")) == (1, 0)
    assert step_events(client, run_id) == [("step_failed", 1)]
    assert "resumed" not in lifecycle(client, run_id)


def test_a_durable_call_never_awaited_fails_the_run_naming_the_call_and_its_line(
    app: App, client: Client, ledger: Ledger
) -> None:
    """Without ``await`` the sleep would be skipped and the run succeed; it fails instead."""

    @app.workflow("test.durable.forgot.v1")
    async def forgot(payload: Any, ctx: Context) -> Any:
        await ctx.step("before", ledger.note, "before")
        ctx.sleep("cool-off", 3600)  # the mistake
        ledger.note("after")
        return "done"

    line = forgot.__code__.co_firstlineno + 3

    @app.workflow("test.durable.awaited.v1")
    async def awaited(payload: Any, ctx: Context) -> Any:
        # Made first and awaited later, or handed to gather: each is awaited.
        later = ctx.step("later", ledger.note, "later", "later")
        both = await asyncio.gather(ctx.now(), ctx.uuid())
        return [await later, len(both)]

    forgotten = client.start("test.durable.forgot.v1").id
    fine = client.start("test.durable.awaited.v1").id
    with working(app):
        run = wait_terminal(client, forgotten)
        done = wait_terminal(client, fine)

    assert run.status is RunStatus.FAILED and run.attempt == 1  # at once: no retry cures it
    error = run.last_error or ""
    assert "NotAwaited" in error and "ctx.sleep('cool-off')" in error, error
    assert f"test_durable.py:{line}" in error, error
    assert ledger.count("after") == 1  # the body did return: that is what is refused
    assert [e["step_name"] for e in journal_of(client, forgotten)] == ["before"]
    assert (done.status, done.result) == (RunStatus.SUCCEEDED, ["later", 2])


def journal_of(client: Client, run_id: str) -> list[dict[str, Any]]:
    return [{"step_name": s.step_name, "kind": s.kind} for s in client.steps(run_id)]


def test_now_uuid_and_random_are_recorded_and_replayed(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.durable.recorded.v1")
    def body(payload: Any, ctx: Context) -> Any:
        seen = {"now": ctx.now().isoformat(), "uuid": ctx.uuid(), "random": ctx.random()}
        ledger.note("seen", seen)
        ctx.sleep("pause", 0.3)
        return seen

    run_id = client.start("test.durable.recorded.v1").id
    started = datetime.now(UTC)
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    first, second = ledger.values("seen")
    assert first == second == run.result
    assert abs((datetime.fromisoformat(first["now"]) - started).total_seconds()) < 30
    assert 0 <= first["random"] < 1
    assert len(first["uuid"]) == 36
    kinds = {s["name"]: s["kind"] for s in journal(store, run_id)}
    assert kinds == {"@now": "now", "@uuid": "uuid", "@random": "random", "pause": "sleep"}


# -- signals -----------------------------------------------------------------------------


def test_a_signal_sent_before_the_wait_began_is_consumed(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.durable.approval.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        await ctx.step("prepare", lambda: ledger.note("prepare"))
        return await ctx.wait_for_event("approval", event="approved", timeout=60)

    run_id = client.start("test.durable.approval.v1").id
    sent = client.signal(run_id, "approved", {"by": "ann"})  # no worker is up yet
    assert not sent.woke, "the run was not waiting yet"
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == {"by": "ann"}
    assert ledger.count("prepare") == 1
    assert "waiting" not in lifecycle(client, run_id), "it waited for a signal already stored"
    consumed = store.sql(
        "select consumed_at, step_name from workflow_signal where run_id = ?", run_id
    )
    assert len(consumed) == 1 and consumed[0][0] is not None and consumed[0][1] == "approval"


def test_a_waiting_run_shows_what_it_waits_for_and_a_signal_wakes_it_at_once(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.durable.approval.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        await ctx.step("prepare", lambda: ledger.note("prepare"))
        return await ctx.wait_for_event("approval", event="approved", timeout="10m")

    run_id = client.start("test.durable.approval.v1").id
    with working(app):
        waiting = wait_suspended(client, run_id, "signal")
        assert waiting.waiting_for["event"] == "approved"
        assert waiting.waiting_for["step"] == "approval"
        assert (waiting.run_at - datetime.now(UTC)).total_seconds() > 300, "run_at is the timeout"
        signalled = time.monotonic()
        sent = client.signal(run_id, "approved", {"by": "bob"})
        assert sent.woke
        run = wait_terminal(client, run_id, timeout=10)
        assert time.monotonic() - signalled < 10

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == {"by": "bob"}
    assert run.waiting_for is None
    assert ledger.count("prepare") == 1, "the journaled step ran again on the resume"
    events = lifecycle(client, run_id)
    assert events.index("waiting") < events.index("signal_received") < events.index("resumed")


def test_a_signal_that_does_not_match_stays_for_a_later_wait(
    app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.durable.orders.v1")
    def body(payload: Any, ctx: Context) -> Any:
        wanted = ctx.wait_for_event("wanted", event="order", match={"id": 2, "tags": ["paid"]})
        ledger.note("matched", wanted)
        other = ctx.wait_for_event("any", event="order", timeout=30)
        return {"wanted": wanted, "other": other}

    run_id = client.start("test.durable.orders.v1").id
    with working(app):
        wait_suspended(client, run_id, "signal")
        not_it = client.signal(run_id, "order", {"id": 1, "tags": ["paid"]})
        assert not not_it.woke, "a signal that does not match woke the run"
        held(client, run_id, 1.0)
        assert client.get(run_id).waiting_for["match"] == {"id": 2, "tags": ["paid"]}
        assert ledger.count("matched") == 0
        client.signal(run_id, "order", {"id": 2, "tags": ["gift", "paid"], "total": 7})
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == {
        "wanted": {"id": 2, "tags": ["gift", "paid"], "total": 7},
        "other": {"id": 1, "tags": ["paid"]},
    }


def test_a_wait_that_times_out_returns_none(store: Store, app: App, client: Client) -> None:
    @app.workflow("test.durable.timeout.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        got = await ctx.wait_for_event("reply", event="reply", timeout=0.5)
        return {"got": got}

    run_id = client.start("test.durable.timeout.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == {"got": None}
    assert lifecycle(client, run_id)[-3:] == ["started", "resumed", "succeeded"]
    [reply] = journal(store, run_id)
    assert (reply["status"], reply["output"]) == ("completed", {"timeout": True})


def test_a_signal_to_an_unknown_or_finished_run_is_refused(app: App, client: Client) -> None:
    @app.workflow("test.durable.quick.v1")
    def body(payload: Any) -> Any:
        return "done"

    with pytest.raises(errors.RunNotFound):
        client.signal("00000000-0000-4000-8000-000000000000", "approved", {})
    run_id = client.start("test.durable.quick.v1").id
    with working(app):
        assert wait_terminal(client, run_id).status is RunStatus.SUCCEEDED
    with pytest.raises(errors.RunFinished, match="succeeded"):
        client.signal(run_id, "approved", {})
    assert "signal_received" not in lifecycle(client, run_id)


# -- children ----------------------------------------------------------------------------


def test_waiting_for_a_run_that_is_not_a_child_is_refused(app: App, client: Client) -> None:
    @app.workflow("test.durable.stranger.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        return await ctx.wait_child(payload["other"])

    other = client.start("test.durable.unclaimed.v1").id  # no handler: stays pending
    run_id = client.start("test.durable.stranger.v1", {"other": other}, max_attempts=1).id
    with working(app):
        run = wait_terminal(client, run_id)
    assert run.status is RunStatus.FAILED
    assert "is not a child of this run" in (run.last_error or "")


def test_a_parent_waits_for_its_childs_result(store: Store, app: App, client: Client) -> None:
    @app.workflow("test.durable.child.v1")
    async def child(payload: Any, ctx: Context) -> Any:
        return await ctx.step("times ten", lambda: payload["n"] * 10)

    @app.workflow("test.durable.parent.v1")
    async def parent(payload: Any, ctx: Context) -> Any:
        child_id = await ctx.start_child("test.durable.child.v1", {"n": payload["n"]})
        value = await ctx.wait_child(child_id)
        return {"child": child_id, "value": value + 1}

    run_id = client.start("test.durable.parent.v1", {"n": 4}).id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result["value"] == 41
    child_run = client.get(run.result["child"])
    assert (child_run.status, child_run.parent_id, child_run.result) == (
        RunStatus.SUCCEEDED,
        run_id,
        40,
    )
    assert store.count() == 2, "the child was started more than once"
    events = lifecycle(client, run_id)
    assert events.count("child_started") == 1, events
    # The parent waits for the child (waiting, then resumed), unless the child had
    # finished when it asked (another slot ran it at once: seen under load in CI).
    assert ("waiting" in events) == ("resumed" in events), events


def test_a_step_whose_output_is_not_json_fails_at_once(
    app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.durable.setstep.v1")
    def body(payload: Any, ctx: Context) -> Any:
        ctx.step("tags", lambda: ledger.note("tags", {"a", "b"}))
        ledger.note("after tags")

    run_id = client.start("test.durable.setstep.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.FAILED
    assert "output of step 'tags': a value of type set is not JSON" in (run.last_error or "")
    assert (ledger.count("tags"), ledger.count("after tags")) == (1, 0)
    assert step_events(client, run_id) == [("step_failed", 1)]


def test_an_uncaught_child_failure_fails_the_parent_without_retrying(
    app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.durable.badchild.v1")
    def child(payload: Any, ctx: Context) -> Any:
        raise errors.PermanentError("out of stock")

    @app.workflow("test.durable.carelessparent.v1")
    def parent(payload: Any, ctx: Context) -> Any:
        ledger.note("parent attempt")
        ctx.wait_child(ctx.start_child("test.durable.badchild.v1"))

    run_id = client.start("test.durable.carelessparent.v1", max_attempts=3).id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.FAILED
    assert run.attempt == 1, "a ChildFailed retry would only replay the same outcome"
    assert "ChildFailed" in (run.last_error or "")


def test_a_failed_child_raises_child_failed_in_the_parent(app: App, client: Client) -> None:
    @app.workflow("test.durable.child.v1")
    def child(payload: Any, ctx: Context) -> Any:
        raise errors.PermanentError("out of stock")

    @app.workflow("test.durable.parent.v1")
    def parent(payload: Any, ctx: Context) -> Any:
        child_id = ctx.start_child("test.durable.child.v1")
        try:
            ctx.wait_child(child_id)
        except errors.ChildFailed as exc:
            return {"status": exc.status, "error": str(exc), "same": exc.child_id == child_id}
        return None

    run_id = client.start("test.durable.parent.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result["status"] == "failed"
    assert run.result["same"] is True
    assert "out of stock" in run.result["error"]


def test_a_child_cancelled_on_its_own_wakes_its_parent_with_child_failed(
    app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.durable.parent.v1")
    def parent(payload: Any, ctx: Context) -> Any:
        # No worker serves this type: the child stays pending until it is cancelled.
        child_id = ctx.start_child("idle.durable.child.v1")
        ctx.step("note", ledger.note, "child", child_id)
        try:
            ctx.wait_child(child_id)
        except errors.ChildFailed as exc:
            return exc.status
        return None

    run_id = client.start("test.durable.parent.v1").id
    with working(app):
        waiting = wait_suspended(client, run_id, "child")
        [child_id] = ledger.values("child")
        assert waiting.waiting_for["child_id"] == child_id
        assert client.cancel(child_id)
        run = wait_terminal(client, run_id, timeout=10)  # the wait has no timeout

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == "cancelled"


def test_cancelling_a_parent_cancels_its_pending_and_sleeping_children(
    app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.durable.sleeper.v1")
    async def sleeper(payload: Any, ctx: Context) -> Any:
        await ctx.sleep("nap", 1.0)
        ledger.note("sleeper woke")

    @app.workflow("test.durable.parent.v1")
    async def parent(payload: Any, ctx: Context) -> Any:
        sleeping = await ctx.start_child("test.durable.sleeper.v1")
        # No worker serves this type: the child stays pending.
        idle = await ctx.start_child("idle.durable.child.v1")
        await ctx.step("note ids", lambda: ledger.note("ids", [sleeping, idle]))
        await ctx.wait_child(sleeping)
        ledger.note("parent went on")

    run_id = client.start("test.durable.parent.v1").id
    with working(app):
        wait_suspended(client, run_id, "child")
        [(sleeping, idle)] = ledger.values("ids")
        wait_suspended(client, sleeping, "sleep")
        assert client.get(idle).status is RunStatus.PENDING
        assert client.cancel(run_id, reason="order withdrawn")
        for run in (run_id, sleeping, idle):
            assert client.get(run).status is RunStatus.CANCELLED, lifecycle(client, run)
        time.sleep(1.5)  # past the child's wake-up time

    assert ledger.count("sleeper woke") == 0
    assert ledger.count("parent went on") == 0
    for child_id in (sleeping, idle):
        child_run = client.get(child_id)
        assert child_run.status is RunStatus.CANCELLED
        assert child_run.waiting_states == []  # it waits for nothing now
        # What it was waiting for is kept: the sleeping one was cut short in its attempt.
        assert child_run.attempts_made == (1 if child_id == sleeping else 0)
        cancelled = [e for e in client.events(child_id) if e.event_type == "cancelled"]
        assert [e.data for e in cancelled] == [{"reason": "parent cancelled", "parent_id": run_id}]
    assert (
        "resumed"
        not in lifecycle(client, sleeping)[lifecycle(client, sleeping).index("sleeping") :]
    )


# -- deadlines and cancellation ----------------------------------------------------------


def test_a_deadline_that_passes_during_a_sleep_fails_the_run(
    app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.durable.deadline.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        await ctx.step("before", lambda: ledger.note("before"))
        await ctx.sleep("long nap", "1h")
        await ctx.step("after", lambda: ledger.note("after"))

    run_id = client.start("test.durable.deadline.v1", deadline=1.5).id
    assert client.get(run_id).deadline is not None, "the deadline was not stored"
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.FAILED
    assert "DeadlineExceeded" in (run.last_error or "")
    assert (ledger.count("before"), ledger.count("after")) == (1, 0)
    assert lifecycle(client, run_id)[-1] == "failed"


def test_the_deadline_is_checked_before_each_new_step(
    app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.durable.deadline.v1")
    def body(payload: Any, ctx: Context) -> Any:
        ctx.step("slow", time.sleep, 1.5)
        ctx.step("next", ledger.note, "next")

    run_id = client.start("test.durable.deadline.v1", deadline=1.0).id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.FAILED
    assert "DeadlineExceeded" in (run.last_error or "")
    assert "before step 'next'" in (run.last_error or "")
    assert ledger.count("next") == 0


def test_a_deadline_ends_a_wait_for_a_signal_long_before_its_timeout(
    app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.durable.deadline.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        await ctx.wait_for_event("reply", event="reply", timeout="1h")
        await ctx.step("next", ledger.note, "next")

    run_id = client.start("test.durable.deadline.v1", deadline=1.0).id
    with working(app):
        run = wait_terminal(client, run_id, timeout=15)

    assert run.status is RunStatus.FAILED
    assert "DeadlineExceeded" in (run.last_error or "")
    assert ledger.count("next") == 0


def test_a_run_cancelled_while_it_sleeps_is_never_resumed(
    app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.durable.nap.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        await ctx.sleep("nap", 1.0)
        await ctx.step("after", lambda: ledger.note("after"))

    run_id = client.start("test.durable.nap.v1").id
    with working(app):
        wait_suspended(client, run_id, "sleep")
        assert client.cancel(run_id)
        assert client.get(run_id).status is RunStatus.CANCELLED
        held(client, run_id, 2.0)  # past the wake-up time

    assert ledger.count("after") == 0
    events = lifecycle(client, run_id)
    assert events[-2:] == ["sleeping", "cancelled"]


def test_an_async_step_sees_cancelled_error_when_its_run_is_cancelled(
    app: App, client: Client, ledger: Ledger
) -> None:
    async def long_call() -> None:
        ledger.note("started")
        await _sleep_until_cancelled(ledger.note, "saw CancelledError")

    @app.workflow("test.durable.longstep.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        await ctx.step("long", long_call)
        await ctx.step("next", lambda: ledger.note("next"))

    run_id = client.start("test.durable.longstep.v1").id
    with working(app):
        wait_until(lambda: ledger.count("started"), 10, "the step never started")
        assert client.cancel(run_id)
        wait_until(lambda: ledger.count("saw CancelledError"), 10, "the step was not cancelled")
        held(client, run_id, 1.0)

    assert client.get(run_id).status is RunStatus.CANCELLED
    assert ledger.count("next") == 0
    assert "step_completed" not in lifecycle(client, run_id)


def test_a_sync_body_stops_at_the_next_step_boundary_when_cancelled(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    go = threading.Event()

    def blocking() -> str:
        ledger.note("started")
        go.wait(30)
        return "finished anyway"

    @app.workflow("test.durable.syncstep.v1")
    def body(payload: Any, ctx: Context) -> Any:
        ctx.step("block", blocking)
        ctx.step("next", lambda: ledger.note("next"))

    run_id = client.start("test.durable.syncstep.v1").id
    with working(app):
        wait_until(lambda: ledger.count("started"), 10, "the step never started")
        assert client.cancel(run_id)
        time.sleep(0.5)  # let the worker hear of it
        go.set()
        held(client, run_id, 1.0)

    assert client.get(run_id).status is RunStatus.CANCELLED
    assert ledger.count("next") == 0
    assert journal(store, run_id) == [], "a step of a cancelled run was journaled"


# -- code changes under running workflows ------------------------------------------------


def versioned_app(store: Store, ledger: Ledger, version: str, compatible: tuple[str, ...]) -> App:
    app = App(store.url, schema=store.schema, retry=QUICK)

    @app.workflow("test.durable.versioned.v1", version=version, compatible=compatible)
    async def body(payload: Any, ctx: Context) -> Any:
        await ctx.step("first", lambda: ledger.note("first"))
        await ctx.sleep("nap", 0.5)
        return {"version": version, "started_on": ctx.code_version}

    return app


def test_a_worker_leaves_runs_of_a_version_it_does_not_know(
    store: Store, client: Client, ledger: Ledger
) -> None:
    run_id = client.start("test.durable.versioned.v1").id
    with working(versioned_app(store, ledger, "1", ())) as old:
        wait_suspended(client, run_id, "sleep")
        old.stop()
    assert client.get(run_id).code_version == "1"

    new = versioned_app(store, ledger, "2", ())
    backend = store.backend()
    try:
        [report] = asyncio.run(replaycheck.check_runs(new, backend))
    finally:
        backend.close()
    assert (report.run_id, report.verdict) == (run_id, replaycheck.UNKNOWN_VERSION)
    assert "'1'" in report.detail

    with working(new):
        time.sleep(1.0)  # past the wake-up time
        run = held(client, run_id, 1.5)
    assert run.status is RunStatus.PENDING
    assert lifecycle(client, run_id).count("leased") == 1, "a worker claimed an unknown version"

    with working(versioned_app(store, ledger, "2", ("1",))):
        run = wait_terminal(client, run_id)
    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == {"version": "2", "started_on": "1"}
    assert ledger.count("first") == 1


def test_a_renamed_step_fails_the_run_with_replay_divergence(
    store: Store, client: Client, ledger: Ledger
) -> None:
    def shop(middle: str) -> App:
        app = App(store.url, schema=store.schema, retry=QUICK)

        @app.workflow("test.durable.shop.v1")
        def body(payload: Any, ctx: Context) -> Any:
            ctx.step("reserve", lambda: ledger.note("reserve"))
            ctx.step(middle, lambda: ledger.note(middle))
            ctx.sleep("cool off", 1.0)
            ctx.step("ship", lambda: ledger.note("ship"))
            return "shipped"

        return app

    run_id = client.start("test.durable.shop.v1").id
    with working(shop("charge")) as old:
        wait_suspended(client, run_id, "sleep")
        old.stop()
    assert [s["name"] for s in journal(store, run_id)] == ["reserve", "charge", "cool off"]

    renamed = shop("bill")
    backend = store.backend()
    try:
        [unchanged] = asyncio.run(replaycheck.check_runs(shop("charge"), backend))
        [report] = asyncio.run(replaycheck.check_runs(renamed, backend))
    finally:
        backend.close()
    assert (unchanged.run_id, unchanged.verdict) == (run_id, replaycheck.OK)
    assert report.verdict == replaycheck.DIVERGED
    assert "'bill'" in report.detail and "'charge'" in report.detail

    with working(renamed):
        run = wait_terminal(client, run_id)
    assert run.status is RunStatus.FAILED
    assert "ReplayDivergence" in (run.last_error or "")
    assert "step 'bill' comes where this run's journal expects" in (run.last_error or "")
    assert (ledger.count("reserve"), ledger.count("charge")) == (1, 1)
    assert (ledger.count("bill"), ledger.count("ship")) == (0, 0)
    assert run.attempt == 1, "a divergence is permanent: no retry"
