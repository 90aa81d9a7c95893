"""Rate limits taken by a workflow's own calls (``ctx.rate_limit``, docs/flow-control.md),
on both stores: tokens taken and journaled, a replay takes none again, over the limit the
run suspends until the next window, shared with a type's claims, per key, bad names."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import Store
from test_durable import journal, wait_suspended, wait_terminal, working

from simpleworkflow import Client, Context, RunStatus, errors
from simpleworkflow.app import App
from simpleworkflow.backends.records import Claim, StepRecord


@pytest.fixture
def app(store: Store) -> App:
    return App(store.url, schema=store.schema)


def used(store: Store, limit: str) -> dict[str, int]:
    """Tokens taken in each key's current window of ``limit``, read from the store."""
    rows = store.sql("select rate_key, used from workflow_rate_window where name = ?", limit)
    return {key: n for key, n in rows}


def events(client: Client, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in client.events(run_id) if e.event_type == kind]


def next_day() -> datetime:
    return datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(1)


def test_tokens_are_journaled_and_a_replay_takes_none_again(
    store: Store, app: App, client: Client
) -> None:
    client.admin.set_rate_limit("partner-api", "10/d")

    @app.workflow("test.rated.replay.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        await ctx.rate_limit("partner-api")
        await ctx.sleep("pause", 0.05)  # the body runs again from the top after this
        await ctx.rate_limit("partner-api", name="second")
        return "done"

    run_id = client.start("test.rated.replay.v1").id
    with working(app):
        run = wait_terminal(client, run_id)
    assert run.status is RunStatus.SUCCEEDED, run.last_error
    entries = [(s["name"], s["kind"], s["status"], s["output"]) for s in journal(store, run_id)]
    token = {"rate_limit": "partner-api", "key": None}
    assert entries == [
        ("rate:partner-api", "rate_limit", "completed", token),
        ("pause", "sleep", "completed", entries[1][3]),
        ("second", "rate_limit", "completed", token),
    ]
    assert used(store, "partner-api") == {"": 2}  # two calls, however many replays


def test_over_the_limit_the_run_waits_for_the_next_window(
    store: Store, app: App, client: Client
) -> None:
    """Sync and async bodies, and parallel calls in a gather: a call with no token left
    suspends the run (throttled), and the same call takes a token in a later window."""
    client.admin.set_rate_limit("quick-a", "1/0.4s")
    client.admin.set_rate_limit("quick-s", "1/0.4s")

    @app.workflow("test.rated.async.v1")
    async def in_async(payload: Any, ctx: Context) -> Any:
        await asyncio.gather(ctx.rate_limit("quick-a"), ctx.rate_limit("quick-a"))
        await ctx.rate_limit("quick-a")
        return "async"

    @app.workflow("test.rated.sync.v1")
    def in_sync(payload: Any, ctx: Context) -> Any:
        for _ in range(3):
            ctx.rate_limit("quick-s")
        return "sync"

    ids = {"quick-a": client.start("test.rated.async.v1").id}
    ids["quick-s"] = client.start("test.rated.sync.v1").id
    with working(app, poll_interval=0.05):
        runs = {limit: wait_terminal(client, run_id) for limit, run_id in ids.items()}
    for limit, run_id in ids.items():
        assert runs[limit].status is RunStatus.SUCCEEDED, runs[limit].last_error
        names = [f"rate:{limit}", f"rate:{limit}#2", f"rate:{limit}#3"]
        assert sorted(s["name"] for s in journal(store, run_id)) == names
        throttled = events(client, run_id, "throttled")
        assert len(throttled) >= 2, client.events(run_id)  # one token per 0.4 s window
        assert {t["rate_limit"] for t in throttled} == {limit}
        assert all(t["step"] in names and "until" in t for t in throttled)
        rows = store.sql(
            "select completed_at from workflow_step where run_id = ? order by completed_at",
            run_id,
        )
        times = [_time(at) for (at,) in rows]
        windows = [int(t.timestamp() / 0.4) for t in times]  # as the windows are counted
        assert len(set(windows)) == 3, times


def test_a_limit_shared_with_a_types_claims_counts_both(
    store: Store, app: App, client: Client
) -> None:
    kind = "test.rated.shared.v1"
    client.admin.set_runtime(kind, "python")
    client.admin.set_rate_limit("shared", "3/d")
    client.admin.limit_rate(kind, "shared")  # each claim of a run takes a token

    @app.workflow(kind)
    async def body(payload: Any, ctx: Context) -> Any:
        await ctx.rate_limit("shared")
        return "done"

    first, second = (run.id for run in client.start_many([(kind, {"n": 1}), (kind, {"n": 2})]))
    with working(app):
        runs = [_settled(client, run_id) for run_id in (first, second)]
    # Two claims and one step took the three tokens: the other step waits for tomorrow.
    assert sorted(run.status.value for run in runs) == ["pending", "succeeded"]
    waiting = next(run for run in runs if run.status is RunStatus.PENDING)
    assert waiting.waiting_for == {
        "kind": "throttle",
        "step": "rate:shared",
        "rate_limit": "shared",
        "until": waiting.run_at.isoformat(),
    }
    assert abs((waiting.run_at - next_day()).total_seconds()) < 0.01
    [throttled] = events(client, waiting.id, "throttled")
    assert throttled["rate_limit"] == "shared" and throttled["step"] == "rate:shared"
    assert used(store, "shared") == {"": 3}


def test_a_per_key_limit_counts_each_key_apart(store: Store, app: App, client: Client) -> None:
    client.admin.set_rate_limit("per-customer", "1/d", per_key=True)

    @app.workflow("test.rated.keys.v1")
    def body(payload: Any, ctx: Context) -> Any:
        for key in payload["keys"]:
            ctx.rate_limit("per-customer", key)
        ctx.rate_limit("per-customer")  # the run's concurrency key
        return "done"

    two = client.start("test.rated.keys.v1", {"keys": ["a", "b"]}, concurrency_key="c").id
    with working(app):
        assert wait_terminal(client, two).status is RunStatus.SUCCEEDED
        again = client.start("test.rated.keys.v1", {"keys": []}, concurrency_key="a").id
        wait_suspended(client, again, "throttle")
    assert used(store, "per-customer") == {"a": 1, "b": 1, "c": 1}
    [token] = [s["output"] for s in journal(store, two) if s["name"] == "rate:per-customer#3"]
    assert token == {"rate_limit": "per-customer", "key": "c"}
    [throttled] = events(client, again, "throttled")
    assert (throttled["rate_limit"], throttled["key"]) == ("per-customer", "a")


def test_an_unknown_limit_raises_in_the_body_and_takes_nothing(
    store: Store, app: App, client: Client
) -> None:
    @app.workflow("test.rated.unknown.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        messages = []
        calls: list[Callable[[], Any]] = [
            lambda: ctx.rate_limit("nope"),
            lambda: ctx.rate_limit("Not A Name"),
            lambda: ctx.rate_limit("nope", key=""),
            lambda: ctx.rate_limit("nope", name=""),
        ]
        for call in calls:
            try:
                await call()
            except errors.InvalidArgument as exc:
                messages.append(str(exc))
        return messages

    run_id = client.start("test.rated.unknown.v1").id
    with working(app):
        run = wait_terminal(client, run_id)
    assert run.status is RunStatus.SUCCEEDED, run.last_error
    unknown, bad_name, bad_key, bad_step = run.result
    assert "no rate limit named 'nope'" in unknown
    assert "simpleworkflow limits set nope" in unknown
    assert "a rate limit's name must be" in bad_name
    assert "a rate limit's key must be" in bad_key
    assert "step name must be" in bad_step
    assert journal(store, run_id) == []
    assert store.count("workflow_rate_window") == 0


def test_concurrent_takers_never_share_the_last_token(store: Store, client: Client) -> None:
    """The statement alone, from many connections at once: 5 tokens, 12 takers."""
    client.admin.set_rate_limit("burst", "5/d")
    client.start_many([("test.rated.burst.v1", {})] * 12)
    backend = store.backend()
    try:
        leases = backend.execute(backend.claim(Claim("w", ("test.rated.burst.v1",), 12, 30)))
        assert len(leases) == 12

        def take(n: int) -> bool:
            lease = leases[n]
            output = json.dumps({"rate_limit": "burst", "key": None})
            step = StepRecord(lease.run.id, lease.token, "rate:burst", "rate_limit", 0, output, 1)
            return backend.execute(backend.take_rate_token(step, "burst", None)).granted

        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            granted = list(pool.map(take, range(12)))
    finally:
        backend.close()
    assert sum(granted) == 5
    assert used(store, "burst") == {"": 5}
    assert store.count("workflow_step") == 5


def _settled(client: Client, run_id: str) -> Any:
    """Wait until the run has succeeded or waits for a rate limit's next window."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        run = client.get(run_id)
        if run.status is RunStatus.SUCCEEDED or (
            run.status is RunStatus.PENDING and (run.waiting_for or {}).get("kind") == "throttle"
        ):
            return run
        time.sleep(0.05)
    raise AssertionError(f"{run_id} neither finished nor throttled: {client.events(run_id)}")


def _time(value: Any) -> datetime:
    """A timestamp as either store hands it over (SQLite: UTC text)."""
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value).replace(tzinfo=UTC)
