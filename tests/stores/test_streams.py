"""Streams a run writes and clients read live (``ctx.stream_append``), on both stores.

A fake language model's tokens are appended from a step, between appends from the body;
readers on other threads (sync and async clients) follow the stream until it closes. Step
functions note every execution in a ledger, so that "written once" is checked against
what really ran.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import psycopg
import pytest
from conftest import Store
from test_cli import run_cli
from test_durable import Ledger, wait_terminal, working

from simpleworkflow import App, Client, Context, RetryPolicy, RunStatus, errors
from simpleworkflow.backends import Backend
from simpleworkflow.backends.records import Claim
from simpleworkflow.backends.stream_ops import Appended
from simpleworkflow.cli import streams as streams_cli
from simpleworkflow.durable import streams
from simpleworkflow.models.streams import StreamItem

QUICK = RetryPolicy(backoff="fixed", base=0.1, jitter=0, max_attempts=3)
TOKENS = 200
CHAT = "test.streams.chat.v1"


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


def chat_app(store: Store, ledger: Ledger, sync: bool, *, fail_once: bool = False) -> App:
    """A chat: "start" from the body, ``TOKENS`` tokens from a step (which, with
    ``fail_once``, fails its first try after appending them all), "end", then close."""
    app = App(store.url, schema=store.schema, retry=QUICK)

    def check_try() -> None:
        if fail_once and ledger.count("generate") == 1:
            raise ConnectionError("the model hung up")

    (sync_chat if sync else async_chat)(app, ledger, check_try)
    return app


def sync_chat(app: App, ledger: Ledger, check_try: Any) -> None:
    @app.workflow(CHAT)
    def body(payload: Any, ctx: Context) -> Any:
        def generate() -> int:
            ledger.note("generate")
            for n in range(TOKENS):
                ctx.stream_append("tokens", {"n": n, "try": ledger.count("generate")})
            check_try()
            return TOKENS

        ctx.stream_append("tokens", "start")
        ctx.step("generate", generate)
        ctx.stream_append("tokens", "end")
        ctx.stream_close("tokens")
        ctx.step("after", ledger.note, "after")
        return "done"


def async_chat(app: App, ledger: Ledger, check_try: Any) -> None:
    @app.workflow(CHAT)
    async def body(payload: Any, ctx: Context) -> Any:
        async def generate() -> int:
            ledger.note("generate")
            for n in range(TOKENS):
                await ctx.stream_append("tokens", {"n": n, "try": ledger.count("generate")})
                if n % 50 == 0:
                    await asyncio.sleep(0)
            check_try()
            return TOKENS

        await ctx.stream_append("tokens", "start")
        await ctx.step("generate", generate)
        await ctx.stream_append("tokens", "end")
        await ctx.stream_close("tokens")
        await ctx.step("after", ledger.note, "after")
        return "done"


def read_all(client: Client, run_id: str, key: str, after: int | None = None) -> list[Any]:
    return [(item.offset, item.value) for item in client.read_stream(run_id, key, after=after)]


@pytest.mark.parametrize("sync", [True, False], ids=["def", "async"])
def test_a_reader_on_another_thread_gets_every_item_live_in_order_until_close(
    store: Store, client: Client, ledger: Ledger, sync: bool
) -> None:
    app = chat_app(store, ledger, sync)
    run_id = client.start(CHAT).id
    got: list[StreamItem] = []
    reader_done = threading.Event()

    def read() -> None:
        with store.client() as own:
            got.extend(own.read_stream(run_id, "tokens"))
        reader_done.set()

    reader = threading.Thread(target=read)
    reader.start()
    with working(app):
        run = wait_terminal(client, run_id)
    reader.join(20)
    assert reader_done.is_set(), "the reader stops at the close"
    assert run.status is RunStatus.SUCCEEDED, run.last_error
    values = [item.value for item in got]
    assert values == ["start", *({"n": n, "try": 1} for n in range(TOKENS)), "end"]
    assert [item.offset for item in got] == list(range(TOKENS + 2))
    assert [(s.key, s.items, s.closed) for s in client.streams(run_id)] == [
        ("tokens", TOKENS + 2, True)
    ]
    # The step's items went in batches: one transaction each, whose time they share.
    times = store.sql(
        "select count(distinct created_at) from workflow_stream_item "
        "where run_id = ? and origin = 'generate'",
        run_id,
    )[0][0]
    assert 1 <= times <= TOKENS // streams.BATCH_ITEMS + 3, times
    # The body's appends and the close are journaled durable calls.
    kinds = [step.kind for step in client.steps(run_id)]
    assert kinds == ["stream", "step", "stream", "stream", "step"]


@pytest.mark.parametrize("sync", [True, False], ids=["def", "async"])
def test_a_step_tried_again_writes_none_of_its_items_twice_and_a_replay_none_at_all(
    store: Store, client: Client, ledger: Ledger, sync: bool
) -> None:
    app = chat_app(store, ledger, sync, fail_once=True)
    run_id = client.start(CHAT).id
    with working(app):
        run = wait_terminal(client, run_id)
    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert ledger.count("generate") == 2, "the failed try ran again, in a later attempt"
    values = [value for _, value in read_all(client, run_id, "tokens")]
    # The first try's items stand; the second try's same items were left out.
    assert values == ["start", *({"n": n, "try": 1} for n in range(TOKENS)), "end"]
    rows = store.sql("select count(*) from workflow_stream_item where run_id = ?", run_id)
    assert rows[0][0] == TOKENS + 3  # the close marker too


@pytest.mark.parametrize("sync", [True, False], ids=["def", "async"])
@pytest.mark.parametrize("ending", ["succeeds", "fails"])
def test_a_stream_left_open_ends_for_its_readers_when_the_run_ends(
    store: Store, client: Client, sync: bool, ending: str
) -> None:
    app = App(store.url, schema=store.schema, retry=QUICK)

    def finish(payload: Any) -> str:
        if payload["ending"] == "fails":
            raise errors.PermanentError("no more")
        return "ok"

    if sync:

        @app.workflow("test.streams.open.v1")
        def body(payload: Any, ctx: Context) -> Any:
            ctx.stream_append("log", 1)
            ctx.stream_append("log", [2, "two"])
            return finish(payload)

    else:

        @app.workflow("test.streams.open.v1")
        async def body(payload: Any, ctx: Context) -> Any:
            await ctx.stream_append("log", 1)
            await ctx.stream_append("log", [2, "two"])
            return finish(payload)

    run_id = client.start("test.streams.open.v1", {"ending": ending}).id
    with working(app):
        run = wait_terminal(client, run_id)
    assert run.status is (RunStatus.SUCCEEDED if ending == "succeeds" else RunStatus.FAILED)
    assert read_all(client, run_id, "log") == [(0, 1), (1, [2, "two"])]
    assert read_all(client, run_id, "log", after=0) == [(1, [2, "two"])]
    assert read_all(client, run_id, "log", after=1) == []
    assert read_all(client, run_id, "never-written") == []
    assert [(s.key, s.items, s.closed) for s in client.streams(run_id)] == [("log", 2, False)]


def test_the_async_client_follows_a_stream_and_resumes_after_an_offset(
    store: Store, client: Client, ledger: Ledger
) -> None:
    app = chat_app(store, ledger, sync=False)
    run_id = client.start(CHAT).id

    async def read(after: int | None) -> list[tuple[int, Any]]:
        async with store.async_client() as own:
            return [
                (i.offset, i.value) async for i in own.read_stream(run_id, "tokens", after=after)
            ]

    async def both() -> tuple[list[tuple[int, Any]], list[tuple[int, Any]]]:
        return await asyncio.gather(read(None), read(TOKENS - 1))

    with working(app):
        everything, tail = asyncio.run(both())
    assert len(everything) == TOKENS + 2
    assert tail == [(TOKENS, {"n": TOKENS - 1, "try": 1}), (TOKENS + 1, "end")]


def test_streams_are_deleted_with_their_run(store: Store, client: Client, ledger: Ledger) -> None:
    app = chat_app(store, ledger, sync=True)
    run_id = client.start(CHAT).id
    with working(app):
        wait_terminal(client, run_id)
    assert store.sql("select count(*) from workflow_stream_item where run_id = ?", run_id)[0][0]
    store.sql("delete from workflow_run where id = ?", run_id)
    assert store.sql("select count(*) from workflow_stream_item")[0][0] == 0


@pytest.mark.parametrize(
    ("key", "value", "complaint"),
    [
        ("has space", 1, "stream key"),
        ("", 1, "stream key"),
        ("k" * 101, 1, "stream key"),
        ("ok", {1, 2}, "item of stream 'ok'"),
    ],
)
def test_a_bad_key_or_value_fails_the_run_with_an_error_that_names_it(
    store: Store, client: Client, key: str, value: Any, complaint: str
) -> None:
    app = App(store.url, schema=store.schema, retry=QUICK)

    @app.workflow("test.streams.bad.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        await ctx.stream_append(key, value)

    run_id = client.start("test.streams.bad.v1").id
    with working(app):
        run = wait_terminal(client, run_id)
    assert run.status is RunStatus.FAILED
    assert complaint in str(run.last_error), run.last_error
    assert run.attempt == 1, "a refused call fails the run at once"


def test_readers_refuse_bad_arguments_and_unknown_runs(client: Client) -> None:
    run_id = client.start("test.streams.nobody.v1").id
    with pytest.raises(errors.InvalidArgument, match="stream key"):
        client.read_stream(run_id, "a/b")
    with pytest.raises(errors.InvalidArgument, match="after"):
        client.read_stream(run_id, "k", after=-2)
    with pytest.raises(errors.RunNotFound):
        next(iter(client.read_stream("0193b0c0-0000-7000-8000-000000000000", "k")))
    with pytest.raises(errors.RunNotFound):
        client.streams("0193b0c0-0000-7000-8000-000000000000")


def test_stream_items_reads_what_is_stored_now_without_waiting(
    store: Store, client: Client, ledger: Ledger
) -> None:
    app = chat_app(store, ledger, sync=True)
    run_id = client.start(CHAT).id
    assert client.stream_items(run_id, "tokens") == [], "nothing written yet: no wait"
    with working(app):
        wait_terminal(client, run_id)
    first = client.stream_items(run_id, "tokens", limit=3)
    assert [(i.offset, i.value) for i in first] == [
        (0, "start"),
        (1, {"n": 0, "try": 1}),
        (2, {"n": 1, "try": 1}),
    ]
    last = client.stream_items(run_id, "tokens", after=TOKENS)
    assert [(i.offset, i.value) for i in last] == [(TOKENS + 1, "end")]
    with pytest.raises(errors.RunNotFound):
        client.stream_items("0193b0c0-0000-7000-8000-000000000000", "tokens")


def test_appends_are_fenced_by_the_lease_and_numbered_after_the_last_item(
    client: Client, backend: Backend
) -> None:
    """At the store: a writer without the lease writes nothing; a batch goes after the
    stream's last item; items an origin wrote already are left out, leaving no gap."""
    run_id = client.start("test.streams.fenced.v1").id
    claim = Claim(worker_id="w", types=("test.streams.fenced.v1",), limit=1, lease_seconds=30)
    (lease,) = backend.execute(backend.claim(claim))
    assert lease.run.id == run_id

    def append(token: str, origin: str, seqs: range) -> Appended:
        items = [(seq, f'"{origin}{seq}"', False) for seq in seqs]
        return backend.execute(backend.append_stream(run_id, token, "k", origin, items))

    assert append("0193b0c0-0000-7000-8000-000000000000", "a", range(3)) == Appended(False)
    assert client.stream_items(run_id, "k") == []
    assert append(lease.token, "a", range(3)) == Appended(True, 3, 0, 2)
    assert append(lease.token, "b", range(2)) == Appended(True, 2, 3, 4)
    # a re-run of a: 0-2 stored, 3-4 new; then a run again that writes nothing new
    assert append(lease.token, "a", range(5)) == Appended(True, 2, 5, 6)
    assert append(lease.token, "a", range(5)) == Appended(True, 0)
    values = [(i.offset, i.value) for i in client.stream_items(run_id, "k")]
    assert values == [(0, "a0"), (1, "a1"), (2, "a2"), (3, "b0"), (4, "b1"), (5, "a3"), (6, "a4")]


def test_on_postgres_each_batch_notifies_the_runs_readers_once(
    store: Store, client: Client, ledger: Ledger
) -> None:
    """A notification per batch written, not per item: a reader waits on it (and polls
    anyway, now and then) rather than polling every few milliseconds."""
    if store.kind != "postgres":
        pytest.skip("SQLite has no notifications: its readers poll")
    app = chat_app(store, ledger, sync=True)
    run_id = client.start(CHAT).id
    with psycopg.connect(store.url, autocommit=True) as listener:
        listener.execute("listen simpleworkflow_stream")
        with working(app):
            wait_terminal(client, run_id)
        heard = [n.payload for n in listener.notifies(timeout=0.5)]
    # start, the step's few batches, end, the close
    assert 4 <= heard.count(run_id) <= TOKENS // streams.BATCH_ITEMS + 6, heard


@pytest.mark.parametrize("sync", [True, False], ids=["def", "async"])
def test_a_def_step_on_a_pool_thread_appends_in_order(
    store: Store, client: Client, sync: bool
) -> None:
    """A plain ``def`` step of an async body runs in the worker's step pool, and one with
    a timeout of a ``def`` body off the body's thread: their appends arrive all the same."""
    app = App(store.url, schema=store.schema, retry=QUICK)

    def count(ctx: Context) -> int:
        for n in range(150):
            ctx.stream_append("numbers", n)
        return 150

    if sync:

        @app.workflow("test.streams.pool.v1")
        def body(payload: Any, ctx: Context) -> Any:
            return ctx.step("count", count, ctx, timeout="30s")

    else:

        @app.workflow("test.streams.pool.v1")
        async def body(payload: Any, ctx: Context) -> Any:
            return await ctx.step("count", count, ctx)

    run_id = client.start("test.streams.pool.v1").id
    with working(app):
        run = wait_terminal(client, run_id)
    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert read_all(client, run_id, "numbers") == [(n, n) for n in range(150)]


def test_the_cli_prints_a_stream_pages_resumes_and_says_what_is_missing(
    store: Store,
    client: Client,
    ledger: Ledger,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``runs stream`` on a finished run: every item, following or not (read a page at a
    time without following), from an offset, as JSON lines; a key the run never wrote is
    status 1, an unknown run or a bad offset status 2. Following live and Ctrl-C are in
    tests/processes/test_cli_stream.py."""
    monkeypatch.setattr(streams_cli, "PAGE", 64)  # several pages without --follow
    app = chat_app(store, ledger, sync=False)
    run_id = client.start(CHAT).id
    with working(app):
        assert wait_terminal(client, run_id).status is RunStatus.SUCCEEDED
    values = ["start", *({"n": n, "try": 1} for n in range(TOKENS)), "end"]
    expected = [f"{i}\t{json.dumps(v, separators=(',', ':'))}" for i, v in enumerate(values)]
    for follow in ("--follow", "--no-follow"):
        printed = run_cli(store, capsys, "runs", "stream", run_id, "tokens", follow)
        assert (printed.code, printed.out.splitlines(), printed.err) == (0, expected, "")

    resumed = run_cli(store, capsys, "runs", "stream", run_id, "tokens", "--after", "199", "--json")
    assert resumed.code == 0, resumed.err
    lines = [json.loads(line) for line in resumed.out.splitlines()]
    assert [(line["offset"], line["value"]) for line in lines] == [
        (200, {"n": 199, "try": 1}),
        (201, "end"),
    ]
    assert all(isinstance(line["created_at"], str) for line in lines)

    missing = run_cli(store, capsys, "runs", "stream", run_id, "nope")
    assert (missing.code, missing.out) == (1, "")
    assert f"run {run_id} has no stream 'nope'" in missing.err
    unknown = run_cli(store, capsys, "runs", "stream", "0193b0c0-0000-7000-8000-000000000000", "k")
    assert (unknown.code, unknown.out) == (2, "")
    assert unknown.err.startswith("simpleworkflow: error: no workflow run with id")
    bad = run_cli(store, capsys, "runs", "stream", run_id, "tokens", "--after", "-5")
    assert bad.code == 2 and "after must be an item's offset" in bad.err
