"""The payload codec (``simpleworkflow.codec``, docs/payloads.md) on both stores: typed
payloads, step results, signals, values and stream items written as plain JSON and read
back by type hints; a replay after a worker restart gives the body the values its first
run saw; SQL containment still filters on the plain JSON; what no store can hold is still
refused before anything is written; a payload that does not fit the handler's annotation
fails the run at once, naming the field."""

from __future__ import annotations

import asyncio
import enum
import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from conftest import Store
from test_durable import journal, wait_suspended, wait_terminal, working
from worker_app import wait_until

from simpleworkflow import Break, Client, Context, Continue, RunStatus, errors
from simpleworkflow.app import App
from simpleworkflow.codec import Codec


class Tier(enum.Enum):
    GOLD = "gold"
    SILVER = "silver"


@dataclass(frozen=True)
class Order:
    id: str
    customer: str
    placed_at: datetime
    total: Decimal
    tier: Tier
    ref: uuid.UUID
    lines: list[Decimal] = field(default_factory=list)


@dataclass(frozen=True)
class Shipped:
    on: date
    carrier: str


ORDER = Order(
    id="o-1",
    customer="c-1",
    placed_at=datetime(2026, 11, 28, 9, 30, tzinfo=UTC),
    total=Decimal("12.30"),
    tier=Tier.GOLD,
    ref=uuid.UUID("12345678-1234-5678-1234-567812345678"),
    lines=[Decimal("10.00"), Decimal("2.30")],
)
DUE = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def due_date(order: Order) -> datetime:
    return order.placed_at.replace(day=1, month=12, hour=12, minute=0)


def charge(order: Order) -> Decimal:
    return order.total * 2


def untyped_now() -> Any:
    return DUE


def make_app(store: Store, codec: Codec, seen: list[dict[str, Any]]) -> App:
    """The app of the test, made again for each worker: a restart knows only its code."""
    app = App(store.url, schema=store.schema, codec=codec)

    @app.workflow("test.codec.order.v1")
    async def place(order: Order, ctx: Context) -> dict[str, Any]:
        due = await ctx.step("due", due_date, order)
        charged = await ctx.step("charge", charge, order)
        loose = await ctx.step("untyped", untyped_now)
        await ctx.set_value("due", due)
        await ctx.stream_append("progress", {"at": due, "amount": charged})
        seen.append({"order": order, "due": due, "charged": charged, "loose": loose})
        shipped = await ctx.wait_for_event(
            "shipped", event="shipped", match={"on": date(2026, 12, 2)}
        )
        return {"order": order, "shipped": codec.decode(shipped, Shipped), "due": due}

    return app


def test_typed_values_round_trip_and_replay_the_same_after_a_restart(store: Store) -> None:
    """A worker runs the body to its wait for a signal and is stopped; the replay check
    replays it, then a new worker (a new app: a restart) after the signal: every step
    result each replay is given equals, with its type, what the first run was given."""
    codec, seen = Codec(), []
    first = make_app(store, codec, seen)
    with first.client() as client:
        run_id = client.start("test.codec.order.v1", ORDER).id
        with working(first):
            wait_suspended(client, run_id, "signal")
        # The replay check decodes as a worker does: the typed body replays to its wait.
        assert [r.verdict for r in client.admin.replay_check(first)] == ["ok"]
        assert len(seen) == 2  # the check's replay saw what the first run saw, too
        client.signal(run_id, "shipped", Shipped(on=date(2026, 12, 2), carrier="post"))
        second = make_app(store, codec, seen)
        with working(second):
            run = wait_terminal(client, run_id)
        assert run.status is RunStatus.SUCCEEDED, run.last_error
        assert len(seen) == 3
        assert seen[0] == seen[1] == seen[2]
        for replayed in seen[1:]:
            assert [type(v) for v in seen[0].values()] == [type(v) for v in replayed.values()]
        assert seen[0]["order"] == ORDER
        assert seen[0]["due"] == DUE and isinstance(seen[0]["due"], datetime)
        assert seen[0]["charged"] == Decimal("24.60") and isinstance(seen[0]["charged"], Decimal)
        # No annotation: the plain JSON on the first run as on replays.
        assert seen[0]["loose"] == DUE.isoformat()

        # Stored as plain JSON that SQL and other runtimes read.
        assert run.payload == {
            "id": "o-1",
            "customer": "c-1",
            "placed_at": "2026-11-28T09:30:00+00:00",
            "total": "12.30",
            "tier": "gold",
            "ref": "12345678-1234-5678-1234-567812345678",
            "lines": ["10.00", "2.30"],
        }
        outputs = {row["name"]: row["output"] for row in journal(store, run_id)}
        assert outputs["due"] == "2026-12-01T12:00:00+00:00"
        assert outputs["charge"] == "24.60"
        assert codec.decode(run.result, dict[str, Any])["due"] == DUE.isoformat()
        result = run.result
        assert codec.decode(result["order"], Order) == ORDER
        assert codec.decode(result["shipped"], Shipped) == Shipped(date(2026, 12, 2), "post")
        value = client.value(run_id, "due")
        assert value is not None and codec.decode(value.value, datetime) == DUE
        items = [item.value for item in client.read_stream(run_id, "progress")]
        assert codec.decode(items, list[dict[str, Decimal | datetime]]) == [
            {"at": DUE, "amount": Decimal("24.60")}
        ]
        # Containment filters see the plain fields, a datetime's text among them.
        for pattern in (
            {"customer": "c-1"},
            {"placed_at": "2026-11-28T09:30:00+00:00"},
            {"placed_at": ORDER.placed_at, "tier": Tier.GOLD},  # written by the client's codec
        ):
            assert [r.id for r in client.list(payload_contains=pattern).runs] == [run_id]
        assert client.list(payload_contains={"customer": "c-2"}).runs == []


def test_what_no_store_holds_is_refused_with_a_codec_too(store: Store) -> None:
    """NaN (a float's or a Decimal's), NUL, lone surrogates and sets are refused at the
    start, naming where they are, and nothing is written."""
    app = App(store.url, schema=store.schema, codec=Codec())
    bad = [
        ({"o": ORDER, "x": float("nan")}, 'payload["x"] is NaN or infinite'),
        ({"o": [Decimal("Infinity")]}, 'payload["o"][0] is NaN or infinite'),
        (Shipped(on=date(2026, 1, 1), carrier="a\x00b"), 'payload["carrier"] contains a NUL'),
        ({"d": Shipped(on=date(2026, 1, 1), carrier="\ud800")}, "lone surrogate"),
        ({"when": DUE, "tags": {"a"}}, 'payload["tags"]: a value of type set is not JSON'),
    ]
    with app.client() as client:
        for payload, message in bad:
            with pytest.raises(errors.InvalidPayload, match=message.replace("[", r"\[")):
                client.start("test.codec.order.v1", payload)
        assert store.count() == 0


def test_a_payload_that_does_not_fit_the_annotation_fails_the_run_at_once(store: Store) -> None:
    """Written by a producer without the codec's types (another runtime, say): a field
    that is not a datetime fails the run on its first attempt, naming the field."""
    codec, seen = Codec(), []
    app = make_app(store, codec, seen)
    with app.client() as client:
        payload = {**codec.decode(codec.to_json(ORDER), dict[str, Any]), "placed_at": "soon"}
        run_id = client.start("test.codec.order.v1", payload, max_attempts=5).id
        with working(app):
            run = wait_terminal(client, run_id)
    assert run.status is RunStatus.FAILED
    assert run.attempt == 1
    assert "payload['placed_at']: 'soon' is not a datetime" in str(run.last_error)
    assert seen == []


def test_a_sync_body_and_a_transactional_step_are_typed_as_well(store: Store) -> None:
    """The same typing in a ``def`` body, for a plain step and a transactional one."""
    codec = Codec()
    app = App(store.url, schema=store.schema, codec=codec)
    seen: list[Any] = []

    def in_transaction(conn: Any, order: Order) -> Decimal:
        return order.total

    @app.workflow("test.codec.sync.v1")
    def body(order: Order, ctx: Context) -> Any:
        due = ctx.step("due", due_date, order)
        total = ctx.transaction("total", in_transaction, order)
        seen.append((due, total))  # on the first run, then on the replay after the sleep
        ctx.sleep("pause", 0.3)  # long enough to suspend (and replay), under load too
        return {"due": due, "total": total}

    with app.client() as client:
        run_id = client.start("test.codec.sync.v1", ORDER).id
        with working(app):
            run = wait_terminal(client, run_id)
    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert len(seen) >= 2 and all(both == (DUE, Decimal("12.30")) for both in seen)
    assert run.result == {"due": "2026-12-01T12:00:00+00:00", "total": "12.30"}


@dataclass(frozen=True)
class Batch:
    until: datetime
    total: Decimal
    rounds: int = 0


def test_children_and_continue_as_new_carry_typed_payloads(store: Store) -> None:
    """A parent starts a child with a dataclass of a datetime and a Decimal; the child,
    annotated, continues as new once with the next one; the parent decodes the result of
    the chain it waited for. Every payload on the way is plain JSON in the store."""
    codec = Codec()
    app = App(store.url, schema=store.schema, codec=codec)

    @app.workflow("test.codec.child.v1")
    async def child(batch: Batch, ctx: Context) -> Any:
        if batch.rounds == 0:
            later = Batch(batch.until.replace(day=2), batch.total * 2, 1)
            await ctx.continue_as_new(later)
        return {"until": batch.until, "total": batch.total + 1}

    @app.workflow("test.codec.parent.v1")
    async def parent(payload: Any, ctx: Context) -> Any:
        child_id = await ctx.start_child("test.codec.child.v1", Batch(DUE, Decimal("2.5")))
        first = codec.decode(await ctx.wait_child(child_id), dict[str, Any])
        return {"child": child_id, "first": first}

    with app.client() as client:
        run_id = client.start("test.codec.parent.v1").id
        with working(app):
            run = wait_terminal(client, run_id)
            assert run.status is RunStatus.SUCCEEDED, run.last_error
            child_run = client.get(run.result["child"])
            assert child_run.payload == {
                "until": "2026-12-01T12:00:00+00:00",
                "total": "2.5",
                "rounds": 0,
            }
            assert child_run.continued_as is not None
            successor = wait_terminal(client, child_run.continued_as)
    assert successor.status is RunStatus.SUCCEEDED, successor.last_error
    assert successor.payload == {"until": "2026-12-02T12:00:00+00:00", "total": "5.0", "rounds": 1}
    assert codec.decode(successor.result, dict[str, datetime | Decimal]) == {
        "until": DUE.replace(day=2),
        "total": Decimal("6.0"),
    }
    # The parent waited for the chain's last run, and read its result back typed.
    assert run.result["first"] == {"until": "2026-12-02T12:00:00+00:00", "total": "6.0"}


def test_loop_states_and_join_results_are_the_journal_s_json_on_every_run(store: Store) -> None:
    """With a codec, a loop's state (committed or not) and result and a join's branch
    results come back as the journal holds them: a datetime as its text on the first run
    as on the replays after each sleep, never a datetime first and text after."""
    app = App(store.url, schema=store.schema, codec=Codec())
    seen: list[tuple[str, Any]] = []

    async def tick(state: dict[str, Any], ctx: Context) -> Any:
        seen.append(("state", state))
        if state["n"] == 2:
            return Break({"at": DUE, "n": state["n"]})
        await ctx.sleep("nap", 0.01)
        return Continue({"at": DUE, "n": state["n"] + 1})

    @app.workflow("test.codec.loop.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        done = await ctx.loop("ticks", {"n": 0}, lambda state: tick(state, ctx), commit_every=2)
        seen.append(("loop", done))
        joined = await ctx.join("both", {"a": lambda: _at(DUE), "b": lambda: _at(DUE)})
        seen.append(("join", joined))
        await ctx.sleep("after", 0.5)  # long enough to suspend: the body is replayed after it
        return "ok"

    with app.client() as client:
        run_id = client.start("test.codec.loop.v1").id
        with working(app):
            run = wait_terminal(client, run_id)
    assert run.status is RunStatus.SUCCEEDED, run.last_error
    text = DUE.isoformat()
    states = [state for kind, state in seen if kind == "state"]
    assert {"at": text, "n": 1} in states and {"at": text, "n": 2} in states
    assert all(state == {"n": 0} or state["at"] == text for state in states)
    loops, joins = ([v for kind, v in seen if kind == want] for want in ("loop", "join"))
    assert len(loops) >= 2 and all(v == {"at": text, "n": 2} for v in loops)  # first run, replays
    assert len(joins) >= 2 and all(v == {"a": text, "b": text} for v in joins)


async def _at(when: datetime) -> datetime:
    return when


# -- reads with ``type=`` ------------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    at: datetime
    amount: Decimal


SHIPPED = Shipped(on=date(2026, 12, 2), carrier="post")
BATCH = Batch(DUE, Decimal("3.5"), 1)  # what the child makes of Batch(DUE, 2.5)


def typed_app(store: Store, codec: Codec | None, seen: list[tuple[str, Any]]) -> App:
    """A parent that reads a signal and a child's result with ``type=``; made again for
    each worker (a restart knows only its code)."""
    app = App(store.url, schema=store.schema, codec=codec)

    @app.workflow("test.codec.typed_child.v1")
    async def child(batch: Batch, ctx: Context) -> Batch:
        return Batch(batch.until, batch.total + 1, batch.rounds + 1)

    @app.workflow("test.codec.typed.v1")
    async def parent(payload: Any, ctx: Context) -> Any:
        shipped = await ctx.wait_for_event("shipped", event="shipped", type=Shipped)
        seen.append(("shipped", shipped))  # taken on the first pass, replayed on the others
        child_id = await ctx.start_child("test.codec.typed_child.v1", Batch(DUE, Decimal("2.5")))
        batch = await ctx.wait_child(child_id, type=Batch)
        seen.append(("batch", batch))  # read once the child ended, then replayed
        late = await ctx.wait_for_event("late", event="never", timeout=0.01, type=Shipped)
        await ctx.set_value("batch", batch)
        await ctx.stream_append("progress", Progress(batch.until, batch.total))
        seen.append(("late", late))
        await ctx.wait_for_event("go", event="go")  # where the first worker is stopped
        return {"shipped": shipped, "batch": batch}

    return app


def waits_for(client: Client, run_id: str, event: str) -> None:
    def waiting() -> bool:
        run = client.get(run_id)
        return isinstance(run.waiting_for, dict) and run.waiting_for.get("event") == event

    wait_until(waiting, 20, lambda: f"run waits for {client.get(run_id).waiting_for}")


def test_type_reads_signals_and_child_results_the_same_after_a_restart(store: Store) -> None:
    """``wait_for_event(type=)`` and ``wait_child(type=)`` give the body typed values on
    the first run and on the replay by a new worker (a restart), equal and of the same
    types; a timed-out wait gives ``None``. The client's reads take ``type=`` too, sync
    and async, and without it read the plain JSON as before."""
    codec, seen = Codec(), []
    first = typed_app(store, codec, seen)
    with first.client() as client:
        run_id = client.start("test.codec.typed.v1").id
        client.signal(run_id, "shipped", SHIPPED)
        with working(first):
            waits_for(client, run_id, "go")
        first_run = len(seen)
        client.signal(run_id, "go")
        with working(typed_app(store, codec, seen)):
            run = wait_terminal(client, run_id)
        assert run.status is RunStatus.SUCCEEDED, run.last_error
        assert len(seen) == first_run + 3  # the new worker replayed the three reads
        by_key = {key: [v for k, v in seen if k == key] for key in ("shipped", "batch", "late")}
        assert by_key["late"] and all(v is None for v in by_key["late"])
        # The first of each was read live by the first worker, the last replayed by the new one.
        assert len(by_key["shipped"]) >= 2 and all(v == SHIPPED for v in by_key["shipped"])
        assert len(by_key["batch"]) >= 2 and all(v == BATCH for v in by_key["batch"])
        for shipped in by_key["shipped"]:
            assert type(shipped.on) is date
        for batch in by_key["batch"]:
            assert type(batch.until) is datetime and type(batch.total) is Decimal

        # The client's reads: plain JSON without type=, typed with it.
        stored = {"shipped": {"on": "2026-12-02", "carrier": "post"}}
        assert client.get(run_id).result["shipped"] == stored["shipped"]
        typed = dict[str, Shipped | Batch]
        want = {"shipped": SHIPPED, "batch": BATCH}
        assert client.wait(run_id, type=typed).result == want
        assert client.get(run_id, type=typed).result == want
        value = client.value(run_id, "batch", type=Batch)
        assert value is not None and value.value == BATCH and value.version == 1
        assert client.wait_value(run_id, "batch", type=Batch).value == BATCH
        assert client.value(run_id, "none", type=Batch) is None
        progress = [Progress(DUE, Decimal("3.5"))]
        assert [i.value for i in client.read_stream(run_id, "progress", type=Progress)] == progress
        assert [i.value for i in client.stream_items(run_id, "progress", type=Progress)] == progress
        assert client.stream_items(run_id, "progress")[0].value == {
            "at": DUE.isoformat(),
            "amount": "3.5",
        }

        async def reads() -> list[Any]:
            async with first.async_client() as own:
                got = [(await own.wait(run_id, type=typed)).result]
                got.append((await own.get(run_id, type=typed)).result)
                got.append((await own.value(run_id, "batch", type=Batch)).value)  # type: ignore[union-attr]
                got.append((await own.wait_value(run_id, "batch", type=Batch)).value)
                got.append(
                    [i.value async for i in own.read_stream(run_id, "progress", type=Progress)]
                )
                got.append(
                    [i.value for i in await own.stream_items(run_id, "progress", type=Progress)]
                )
                return got

        assert asyncio.run(reads()) == [want, want, BATCH, BATCH, progress, progress]


def test_type_without_a_codec_reads_with_a_default_one(store: Store) -> None:
    """An app and a client without a codec read ``type=`` with a default codec: a signal
    written as plain JSON (a date's ISO text) is read as a ``Shipped``; one that does not
    fit fails the run at once, naming the signal and the field; a failed run's result is
    left as it is (none)."""
    seen: list[Any] = []
    app = App(store.url, schema=store.schema)

    @app.workflow("test.codec.default.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        shipped = await ctx.wait_for_event("shipped", event="shipped", type=Shipped)
        seen.append(shipped)
        return {"on": shipped.on.isoformat(), "carrier": shipped.carrier}

    with app.client() as client:
        good = client.start("test.codec.default.v1").id
        client.signal(good, "shipped", {"on": "2026-12-02", "carrier": "post"})
        bad = client.start("test.codec.default.v1", max_attempts=5).id
        client.signal(bad, "shipped", {"on": "soon", "carrier": "post"})
        with working(app):
            assert client.wait(good, 20, type=Shipped).result == SHIPPED
            failed = client.wait(bad, 20, type=Shipped)
    assert seen == [SHIPPED]
    assert failed.status is RunStatus.FAILED and failed.attempt == 1
    assert failed.result is None
    assert "payload of signal 'shipped'['on']: 'soon' is not a date" in str(failed.last_error)
    with pytest.raises(
        errors.InvalidPayload, match=r"result of run .*\['carrier'\]: 'post' is not a datetime"
    ):
        client.get(good, type=dict[str, datetime])


@pytest.mark.parametrize("codec", [None, Codec()], ids=["no codec", "codec"])
def test_a_race_hands_back_its_winner_as_the_journal_holds_it(
    store: Store, codec: Codec | None
) -> None:
    """A race won by a typed wait journals the value (a ``date`` with no codec too) and
    hands back the journal's JSON on the first run as on the replay after a sleep."""
    app = App(store.url, schema=store.schema, codec=codec)
    seen: list[Any] = []

    @app.workflow("test.codec.race.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        shipped = ctx.wait_for_event("shipped", event="shipped", type=Shipped)
        seen.append(await ctx.race("first", shipped, ctx.sleep("never", "1h")))
        await ctx.sleep("after", 0.5)  # long enough to suspend: the body is replayed after it
        return "ok"

    with app.client() as client:
        run_id = client.start("test.codec.race.v1").id
        client.signal(run_id, "shipped", {"on": "2026-12-02", "carrier": "post"})
        with working(app):
            run = wait_terminal(client, run_id)
    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert len(seen) >= 2 and all(v == (0, {"on": "2026-12-02", "carrier": "post"}) for v in seen)


def test_schedule_and_fork_payloads_are_written_through_the_codec(store: Store) -> None:
    """``@app.schedule`` writes its payload with the app's codec, ``client.schedules`` and
    ``client.admin.fork`` with the client's: a datetime and a Decimal as their text."""
    app = App(store.url, schema=store.schema, codec=Codec())

    @app.schedule("test.codec.tick.v1", cron="0 3 * * *", payload={"since": DUE})
    @app.workflow("test.codec.tick.v1")
    async def tick(payload: Any, ctx: Context) -> Any:
        return await ctx.step("total", charge, ORDER)

    assert app.schedules["test.codec.tick.v1"].payload == '{"since":"2026-12-01T12:00:00+00:00"}'
    with app.client() as client:
        made = client.schedules.create(
            "typed", "test.codec.tick.v1", cron="0 4 * * *", payload={"total": Decimal("1.50")}
        )
        assert made.payload == {"total": "1.50"}
        run_id = client.start("test.codec.tick.v1", {"n": 1}).id
        with working(app):
            assert wait_terminal(client, run_id).status is RunStatus.SUCCEEDED
        fork = client.admin.fork(run_id, from_step="total", payload=Batch(DUE, Decimal("2.5")))
        assert fork.payload == {"until": DUE.isoformat(), "total": "2.5", "rounds": 0}
