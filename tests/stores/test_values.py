"""Values a run publishes (``ctx.set_value``, docs/durable.md), on both stores: published
from async and def bodies and read by clients, replaced by a later set, never published
twice by a replay, not at all by an attempt that lost its lease; ``wait_value`` woken by a
set, and timing out; values deleted with their run; bad keys and unknown runs refused."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time
from typing import Any

import pytest
from conftest import Store
from test_cli import run_cli
from test_durable import journal, wait_terminal, working

from simpleworkflow import Client, Context, RunStatus, errors
from simpleworkflow.app import App
from simpleworkflow.backends import Backend
from simpleworkflow.backends.postgres import run_wakeups
from simpleworkflow.backends.records import Claim, Lease, StepRecord

NO_TOKEN = "00000000-0000-4000-8000-000000000000"


@pytest.fixture
def app(store: Store) -> App:
    return App(store.url, schema=store.schema)


def value_events(client: Client, run_id: str) -> list[dict[str, Any]]:
    return [e.data for e in client.events(run_id) if e.event_type == "value_set"]


def test_values_are_published_replaced_and_never_twice_by_a_replay(
    store: Store, app: App, client: Client
) -> None:
    """Both kinds of body set a key twice around a sleep (the body runs again from the
    top after it): the journal answers the first set on the replay, so each key counts
    two sets, and the audit trail keeps both values."""

    @app.workflow("test.values.async.v1")
    async def in_async(payload: Any, ctx: Context) -> Any:
        await ctx.set_value("status", "paid")
        await ctx.set_value("progress", {"done": 1, "of": 2})
        await ctx.sleep("pause", 0.05)
        await ctx.set_value("status", "shipped")
        return "done"

    @app.workflow("test.values.sync.v1")
    def in_sync(payload: Any, ctx: Context) -> Any:
        ctx.set_value("status", "paid")
        ctx.set_value("progress", {"done": 1, "of": 2})
        ctx.sleep("pause", 0.05)
        ctx.set_value("status", "shipped")
        return "done"

    ids = [client.start(t).id for t in ("test.values.async.v1", "test.values.sync.v1")]
    with working(app):
        for run_id in ids:
            run = wait_terminal(client, run_id)
            assert run.status is RunStatus.SUCCEEDED, run.last_error
    for run_id in ids:
        values = {v.key: (v.value, v.version, v.step_name) for v in client.values(run_id)}
        assert values == {
            "progress": ({"done": 1, "of": 2}, 1, "value:progress"),
            "status": ("shipped", 2, "value:status#2"),
        }
        assert client.value(run_id, "status").value == "shipped"  # type: ignore[union-attr]
        assert client.value(run_id, "missing") is None
        assert value_events(client, run_id) == [
            {"key": "status", "value": "paid", "step": "value:status"},
            {"key": "progress", "value": {"done": 1, "of": 2}, "step": "value:progress"},
            {"key": "status", "value": "shipped", "step": "value:status#2"},
        ]
        kinds = [(e["name"], e["kind"]) for e in journal(store, run_id)]
        assert kinds == [
            ("value:status", "value"),
            ("value:progress", "value"),
            ("pause", "sleep"),
            ("value:status#2", "value"),
        ]
        assert [s.kind for s in client.steps(run_id)].count("value") == 3


def test_bad_keys_values_and_runs_are_refused(store: Store, app: App, client: Client) -> None:
    @app.workflow("test.values.bad.v1")
    async def bad(payload: Any, ctx: Context) -> Any:
        if payload["what"] == "key":
            await ctx.set_value("no spaces", 1)
        await ctx.set_value("ok", object())
        return "unreachable"

    ids = [client.start("test.values.bad.v1", {"what": w}).id for w in ("key", "value")]
    with working(app):
        runs = [wait_terminal(client, run_id) for run_id in ids]
    assert [r.status for r in runs] == [RunStatus.FAILED, RunStatus.FAILED]
    assert "invalid value key 'no spaces'" in (runs[0].last_error or "")
    assert "value 'ok'" in (runs[1].last_error or "")
    assert client.values(ids[0]) == []
    with pytest.raises(errors.InvalidArgument, match="value key"):
        client.value(ids[0], "x" * 101)
    with pytest.raises(errors.InvalidArgument, match="after"):
        client.wait_value(ids[0], "ok", 1, after=-1)
    unknown = "00000000-0000-7000-8000-000000000000"
    with pytest.raises(errors.RunNotFound):
        client.values(unknown)
    with pytest.raises(errors.RunNotFound):
        client.wait_value(unknown, "ok", 1)


def claim(backend: Backend, run_type: str) -> Lease:
    (lease,) = backend.execute(backend.claim(Claim("w", (run_type,), 1, 30)))
    return lease


def set_record(lease: Lease, name: str, key: str, token: str | None = None) -> StepRecord:
    events = [{"type": "value_set", "data": {"key": key, "value": name, "step": name}}]
    output = json.dumps({"key": key})
    return StepRecord(
        lease.run.id, token or lease.token, name, "value", 0, output, 1, events=events
    )


def test_a_set_without_the_lease_writes_nothing(
    store: Store, client: Client, backend: Backend
) -> None:
    """A stale token, and a lease that ran out in the store: no value, no journal entry,
    no event."""
    run_id = client.start("test.values.fenced.v1").id
    lease = claim(backend, "test.values.fenced.v1")
    stale = set_record(lease, "value:k", "k", NO_TOKEN)
    assert backend.execute(backend.set_value(stale, "k", '"x"')) is False
    store.sql("update workflow_run set lease_until = '2000-01-01 00:00:00' where id = ?", run_id)
    late = set_record(lease, "value:k", "k")
    assert backend.execute(backend.set_value(late, "k", '"x"')) is False
    assert client.values(run_id) == []
    assert client.steps(run_id) == []
    assert value_events(client, run_id) == []


def test_wait_value_wakes_on_a_set_and_times_out(client: Client, backend: Backend) -> None:
    """A reader waits in another thread while the run's holder sets the key: it returns
    the value; ``after`` the version it read, it waits for the next set."""
    run_id = client.start("test.values.wait.v1").id
    lease = claim(backend, "test.values.wait.v1")
    with pytest.raises(errors.WaitTimeout, match="set no value 'state'"):
        client.wait_value(run_id, "state", timeout=0.2)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first = pool.submit(client.wait_value, run_id, "state", 20)
        time.sleep(0.3)  # the reader is waiting (if not, it reads the value at once)
        assert not first.done()
        backend.execute(backend.set_value(set_record(lease, "value:state", "state"), "state", "1"))
        assert first.result(20).value == 1
        second = pool.submit(client.wait_value, run_id, "state", 20, after=1)
        time.sleep(0.3)
        assert not second.done()
        record = set_record(lease, "value:state#2", "state")
        backend.execute(backend.set_value(record, "state", "2"))
        got = second.result(20)
    assert (got.value, got.version) == (2, 2)
    assert client.wait_value(run_id, "state", 0.1).version == 2  # already there
    with pytest.raises(errors.WaitTimeout, match="past version 2"):
        client.wait_value(run_id, "state", timeout=0.2, after=2)


def test_a_wait_ends_with_run_finished_once_the_run_ends_without_the_value(
    app: App, client: Client
) -> None:
    """Readers that would wait for ever (no timeout) for a key the run never sets, or for
    a version it never reaches, get RunFinished (with how the run ended) once it ends; a
    reader of an ended run that did set the value gets it."""

    @app.workflow("test.values.ends.v1")
    def body(payload: Any, ctx: Context) -> Any:
        ctx.set_value("stage", "paid")
        ctx.wait_for_event("go", event="go", timeout=60)
        return "done"

    run_id = client.start("test.values.ends.v1").id
    with working(app), concurrent.futures.ThreadPoolExecutor(2) as pool:
        assert client.wait_value(run_id, "stage", 20).version == 1
        never = pool.submit(client.wait_value, run_id, "never")
        newer = pool.submit(client.wait_value, run_id, "stage", after=1)
        time.sleep(0.3)  # both wait (if not, they would have raised already)
        assert not never.done() and not newer.done()
        client.signal(run_id, "go")
        for waiting, since in ((never, ""), (newer, " past version 1")):
            with pytest.raises(errors.RunFinished) as ended:
                waiting.result(30)
            assert ended.value.status == "succeeded" and ended.value.run_id == run_id
            assert f"without setting value {'never' if not since else 'stage'!r}{since}" in str(
                ended.value
            )
    assert client.wait_value(run_id, "stage").value == "paid"  # set: the end changes nothing
    with pytest.raises(errors.RunFinished, match=r"ended \(succeeded\)"):
        client.wait_value(run_id, "never", timeout=60)


def test_an_async_wait_ends_when_the_run_is_cancelled(store: Store, client: Client) -> None:
    run_id = client.start("test.values.cancelled.v1").id

    async def read() -> errors.RunFinished:
        async with store.async_client() as reader:
            waiting = asyncio.ensure_future(reader.wait_value(run_id, "k"))
            await asyncio.sleep(0.3)
            assert not waiting.done()
            await reader.cancel(run_id)
            with pytest.raises(errors.RunFinished) as ended:
                await asyncio.wait_for(waiting, 30)
            return ended.value

    ended = asyncio.run(read())
    assert ended.status == "cancelled" and "without setting value 'k'" in str(ended)


def test_async_readers(store: Store, client: Client, backend: Backend) -> None:
    run_id = client.start("test.values.async_read.v1").id
    lease = claim(backend, "test.values.async_read.v1")

    async def read() -> tuple[Any, ...]:
        async with store.async_client() as reader:
            waiting = asyncio.ensure_future(reader.wait_value(run_id, "k", 20))
            await asyncio.sleep(0.3)
            assert not waiting.done()
            await asyncio.to_thread(
                backend.execute, backend.set_value(set_record(lease, "value:k", "k"), "k", "[1]")
            )
            got = await waiting
            with pytest.raises(errors.WaitTimeout):
                await reader.wait_value(run_id, "k", 0.2, after=got.version)
            return got.value, await reader.value(run_id, "k"), await reader.values(run_id)

    got, one, every = asyncio.run(read())
    assert got == [1]
    assert one is not None and one.value == [1]
    assert [v.key for v in every] == ["k"]


def test_values_are_deleted_with_their_run(store: Store, app: App, client: Client) -> None:
    @app.workflow("test.values.purged.v1")
    def body(payload: Any, ctx: Context) -> Any:
        ctx.set_value("k", payload)
        return "done"

    ids = [client.start("test.values.purged.v1", n).id for n in range(2)]
    with working(app):
        for run_id in ids:
            assert wait_terminal(client, run_id).status is RunStatus.SUCCEEDED
    store.sql("update workflow_run set updated_at = '2000-01-01 00:00:00' where id = ?", ids[0])
    assert client.admin.purge("1d") == 1
    assert [str(r) for (r,) in store.sql("select run_id from workflow_value")] == [ids[1]]


def test_the_cli_lists_reads_and_waits_for_values(
    store: Store, client: Client, backend: Backend, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = client.start("test.values.cli.v1").id
    lease = claim(backend, "test.values.cli.v1")
    none = run_cli(store, capsys, "runs", "values", run_id)
    assert (none.code, none.out) == (0, f"run {run_id} has published no value\n")
    unset = run_cli(store, capsys, "runs", "values", run_id, "stage")
    assert (unset.code, unset.out) == (1, f"run {run_id} has set no value 'stage'\n")
    backend.execute(
        backend.set_value(set_record(lease, "value:stage", "stage"), "stage", '{"a":1}')
    )

    listed = run_cli(store, capsys, "runs", "values", run_id, "--json")
    assert listed.code == 0, listed.err
    assert [(v["key"], v["value"], v["version"]) for v in listed.json()] == [("stage", {"a": 1}, 1)]
    table = run_cli(store, capsys, "runs", "values", run_id, "stage").out.splitlines()
    assert table[0].split() == ["KEY", "VERSION", "SET", "(UTC)", "STEP", "VALUE"]
    assert table[1].split()[:2] + table[1].split()[-2:] == ["stage", "1", "value:stage", '{"a":1}']
    waited = run_cli(store, capsys, "runs", "values", run_id, "stage", "--wait", "5s", "--json")
    assert [v["version"] for v in waited.json()] == [1]
    late = run_cli(
        store, capsys, "runs", "values", run_id, "stage", "--wait", "0.2s", "--after", "1"
    )
    assert late.code == 2 and "past version 1" in late.err
    client.cancel(run_id)
    ended = run_cli(
        store, capsys, "runs", "values", run_id, "stage", "--wait", "1h", "--after", "1"
    )
    assert ended.code == 2 and "ended (cancelled) without setting value 'stage'" in ended.err
    bad = run_cli(store, capsys, "runs", "values", run_id, "--after", "1")
    assert bad.code == 2 and "--wait and --after need a KEY" in bad.err
    unknown = run_cli(store, capsys, "runs", "values", "00000000-0000-4000-8000-000000000000")
    assert unknown.code == 2 and "no workflow run with id" in unknown.err


def test_a_listener_that_cannot_connect_is_the_stores_outage() -> None:
    """On Postgres, a reader that cannot open its listening connection gets
    StoreUnavailable, as for any other connection the client cannot open."""
    hub = run_wakeups.Hub(lambda: "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")
    refused = pytest.raises(errors.StoreUnavailable, match="waits for a run's values")
    with refused, run_wakeups.listening(hub, NO_TOKEN):
        pass

    async def listen() -> None:
        async with run_wakeups.listening_async(hub, NO_TOKEN):
            pass

    with pytest.raises(errors.StoreUnavailable, match="waits for a run's values"):
        asyncio.run(listen())
