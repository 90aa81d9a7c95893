"""A worker through real database outages: a Postgres restarted with an immediate stop,
its connections ended by an operator who found them by ``application_name``, a network
that goes silent, and connections gone half-open (``tests/tcp_proxy.py``, a TCP proxy in
the test that stops passing bytes, or cuts the server's side of its connections).

The server here is a private one, started by this module, so that restarting it
disturbs no other test. Nothing may be lost, no attempt charged for the outage, no
journaled step run twice, and claiming must resume soon after the server is back. A
crash may take the claims of its last moment, which do not wait for the disk
(tests/test_database_crash.py): the first step of such a run, in flight at the crash
and never journaled, runs again.

SQLite has no server to restart nor connections to end: what these faults mean for it
(a locked file) is covered in test_connection_errors.py.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from conftest import Store, poller_thread
from tcp_proxy import SilentableProxy, silentable_proxy
from worker_app import wait_until

from simpleworkflow import App, Client, Context, IntentPoller, RunStatus, errors, outage
from simpleworkflow.backends.base import Op, Rows, Statement
from simpleworkflow.backends.postgres import PostgresBackend

TYPE = "outage.steps.v1"
STEPS = ("fetch", "transform", "store")


class PrivateServer:
    """A pgserver instance of this module's own, which a test may restart."""

    def __init__(self, data_dir: str) -> None:
        import pgserver

        self.server: Any = pgserver.get_server(data_dir, cleanup_mode="stop")  # type: ignore[attr-defined]
        self.url: str = self.server.get_uri()

    def restart(self) -> float:
        """Stop the server as a crash would (no checkpoint, every session cut), start it
        again; return when it accepts connections (``time.monotonic()``)."""
        from pgserver._commands import pg_ctl  # type: ignore[import-untyped]

        server = self.server
        pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=server.pgdata, user=server.system_user)
        server.ensure_postgres_running()
        wait_until(self._accepts, 30, "the restarted server accepts no connection")
        return time.monotonic()

    def _accepts(self) -> bool:
        try:
            psycopg.connect(self.url, connect_timeout=2).close()
        except psycopg.OperationalError:
            return False
        return True


@contextlib.contextmanager
def private_server(name: str, *settings: str) -> Iterator[PrivateServer]:
    """A Postgres of the module's own (``settings``: ``alter system`` clauses applied
    first), its data removed at the end."""
    with tempfile.TemporaryDirectory(prefix=f"simpleworkflow-{name}-pg-") as data_dir:
        private = PrivateServer(data_dir)
        if settings:
            with psycopg.connect(private.url, autocommit=True) as conn:
                for setting in settings:
                    conn.execute(f"alter system set {setting}")
                conn.execute("select pg_reload_conf()")
        try:
            yield private
        finally:
            private.server.cleanup()


_schemas = itertools.count()


def fresh_store(server: PrivateServer, name: str) -> Store:
    """A store in a schema of its own on ``server``, migrated."""
    return Store("postgres", server.url, schema=f"{name}_{next(_schemas)}").migrate()


@pytest.fixture(scope="module")
def server() -> Iterator[PrivateServer]:
    with private_server("outage") as private:
        yield private


@pytest.fixture
def pg_store(server: PrivateServer) -> Store:
    return fresh_store(server, "outage")


class Witness:
    """What the step bodies saw, kept outside the engine: each execution, and when."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.executions: collections.Counter[tuple[str, str]] = collections.Counter()
        self.started: dict[str, float] = {}

    def ran(self, run_id: str, step: str) -> None:
        with self.lock:
            self.executions[(run_id, step)] += 1
            self.started.setdefault(run_id, time.monotonic())


def steps_app(store: Store, witness: Witness) -> App:
    app = App(store.url, schema=store.schema)

    @app.workflow(TYPE)
    def handler(payload: dict[str, Any], ctx: Context) -> int:
        for step in STEPS:

            def body(step: str = step) -> str:
                witness.ran(ctx.run_id, step)
                time.sleep(0.05)
                return step

            ctx.step(step, body)
        return int(payload["n"])

    return app


def start(store: Store, count: int, first: int = 0) -> list[str]:
    with store.client() as client:
        requests = [(TYPE, {"n": n}) for n in range(first, first + count)]
        return [run.id for run in client.start_many(requests)]


def finished(store: Store, ids: list[str]) -> int:
    try:
        with store.client() as client:
            return sum(client.get(run_id).is_terminal for run_id in ids)
    except errors.StoreUnavailable:
        return 0


def assert_all_done_once(
    store: Store, witness: Witness, ids: list[str], claims_lost: bool = False
) -> None:
    """Every run succeeded at its first attempt, and every step body ran exactly once;
    with ``claims_lost`` (a crash), a run's first step may have run twice."""
    with Client(store.url, schema=store.schema) as client:
        runs = [client.get(run_id) for run_id in ids]
    assert [run.status for run in runs] == [RunStatus.SUCCEEDED] * len(ids)
    charged = {run.id: run.attempt for run in runs if run.attempt}
    assert not charged, f"attempts charged for the outage: {charged}"
    again = {STEPS[0]: 2} if claims_lost else {}
    repeated = {key: n for key, n in witness.executions.items() if n != 1}
    assert all(n <= again.get(step, 1) for (_, step), n in repeated.items()), (
        f"steps run more than once: {repeated}"
    )
    assert len(witness.executions) == len(ids) * len(STEPS)


def test_a_worker_rides_through_immediate_restarts(pg_store: Store, server: PrivateServer) -> None:
    witness = Witness()
    app = steps_app(pg_store, witness)
    ids = start(pg_store, 60)
    # A lease long enough to outlast a restart on a loaded machine: the worker rides
    # through it rather than fencing itself (which would rightly run a step again).
    with poller_thread(app, concurrency=6, lease_duration=15, poll_interval=1.0):
        for restart in range(3):
            enough = 10 * (restart + 1)
            wait_until(lambda n=enough: len(witness.started) >= n, 60, "no progress")
            back = server.restart()
            # Runs started now are claimed only once the worker claims again.
            fresh = start(pg_store, 3, first=1000 + 10 * restart)
            ids += fresh
            wait_until(lambda f=fresh: all(r in witness.started for r in f), 60, "not claimed")
            resumed = min(witness.started[r] for r in fresh) - back
            # The target is 2 s (see benchmarks/restart.py); a loaded machine gets slack.
            assert resumed < 8, f"claiming resumed {resumed:.1f}s after the restart"
        wait_until(lambda: finished(pg_store, ids) == len(ids), 90, "runs left unfinished")
    assert_all_done_once(pg_store, witness, ids, claims_lost=True)


def test_an_operator_ends_a_workers_connections_by_its_name(pg_store: Store) -> None:
    witness = Witness()
    app = steps_app(pg_store, witness)
    ids = start(pg_store, 60)
    with poller_thread(app, concurrency=6, lease_duration=5, worker_id="outage-w1") as poller:
        for ended in range(3):
            enough = 30 * (ended + 1)
            wait_until(lambda n=enough: len(witness.executions) >= n, 60, "no progress")
            with psycopg.connect(pg_store.url, autocommit=True) as admin:
                rows = admin.execute(
                    "select pg_terminate_backend(pid) from pg_stat_activity "
                    "where application_name = %s",
                    (poller.worker_id,),
                ).fetchall()
            assert rows, "no connection is named after the worker"
        wait_until(lambda: finished(pg_store, ids) == len(ids), 90, "runs left unfinished")
    assert_all_done_once(pg_store, witness, ids)


def test_a_clients_connections_are_named(pg_store: Store) -> None:
    with pg_store.client() as client:
        client.list()
        names = pg_store.sql(
            "select application_name from pg_stat_activity where application_name like ?",
            "simpleworkflow%",
        )
    assert ("simpleworkflow client",) in names


@pytest.fixture
def proxy(server: PrivateServer) -> Iterator[SilentableProxy]:
    with silentable_proxy(server.url) as proxy:
        yield proxy


def proxied_poller(
    app: App, store: Store, proxy: SilentableProxy, call_timeout: float = 2.0, **options: Any
) -> IntentPoller:
    """A worker whose every store call goes through ``proxy``, with a short deadline."""
    backend = PostgresBackend(
        proxy.url, schema=store.schema, application_name="proxied", call_timeout=call_timeout
    )
    return IntentPoller(app, backend=backend, **options)


def outage_lines(caplog: pytest.LogCaptureFixture) -> tuple[int, int]:
    messages = [r.getMessage() for r in caplog.records if r.name == "simpleworkflow.worker"]
    began = sum("cannot reach the store" in m for m in messages)
    return began, sum("answers again" in m for m in messages)


def test_a_worker_carries_on_after_the_network_went_silent(
    pg_store: Store, proxy: SilentableProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    witness = Witness()
    app = steps_app(pg_store, witness)
    ids = start(pg_store, 40)
    poller = proxied_poller(app, pg_store, proxy, concurrency=4, lease_duration=20)
    with poller_thread(app, poller=poller):
        wait_until(lambda: len(witness.started) >= 5, 60, "no progress")
        proxy.silence()
        wait_until(lambda: outage_lines(caplog)[0], 30, "the outage was not logged")
        time.sleep(3)  # past the calls' deadline: they fail and are tried again
        proxy.unsilence()
        wait_until(lambda: finished(pg_store, ids) == len(ids), 90, "runs left unfinished")
    assert_all_done_once(pg_store, witness, ids)
    began, ended = outage_lines(caplog)
    # Once: calls caught by the silence that time out after it healed are part of it. A
    # second at most, should a call begun after the end wait on a connection being opened
    # when the network went silent.
    assert began == ended and 1 <= began <= 2, f"{began} outages logged, {ended} ends"


def test_a_call_begun_before_an_outage_ended_that_fails_after_is_no_new_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    log = logging.getLogger("simpleworkflow.worker")
    seen = outage.Outage(log, "the test store")

    def failure(began: float) -> errors.StoreUnavailable:
        exc = errors.StoreUnavailable("Postgres did not answer within 2s")
        exc.began = began
        return exc

    seen.failed(failure(time.monotonic()))
    straggling = time.monotonic()  # caught by the outage, fails after it ended
    seen.ended()
    seen.failed(failure(straggling))
    assert not seen.down
    seen.failed(failure(time.monotonic()))  # begun after the end: a new outage
    assert seen.down
    seen.ended()
    assert outage_lines(caplog) == (2, 2)


def test_a_worker_carries_on_at_once_after_its_connections_went_half_open(
    pg_store: Store, proxy: SilentableProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """The server's side of every connection is gone, and nothing tells the worker: its
    calls would wait for their deadline (here ten minutes). It must find out by itself,
    reconnect and finish every run, each step once, long before its calls' deadline.

    A claim the server applied just before the cut, whose answer was lost with it, leaves
    its runs leased to a worker that never heard of them: they are recovered when that
    lease ends (10 s here), as after a crash, having run nothing."""
    caplog.set_level(logging.INFO)
    witness = Witness()
    app = steps_app(pg_store, witness)
    ids = start(pg_store, 40)
    poller = proxied_poller(
        app, pg_store, proxy, call_timeout=600, concurrency=4, lease_duration=10, poll_interval=0.5
    )
    with poller_thread(app, poller=poller):
        wait_until(lambda: len(witness.started) >= 5, 60, "no progress")
        proxy.half_open()
        wait_until(lambda: finished(pg_store, ids) == len(ids), 90, "runs left unfinished")
    with Client(pg_store.url, schema=pg_store.schema) as client:
        assert {client.get(run_id).status for run_id in ids} == {RunStatus.SUCCEEDED}
    repeated = {key: n for key, n in witness.executions.items() if n != 1}
    assert not repeated, f"steps run more than once: {repeated}"
    began, ended = outage_lines(caplog)
    # Each outage's end is logged. A few at most: calls begun on the pool's dead
    # connections after a probe are cut by the next one, and each wave is an outage of its
    # own; none when only calls that retry quietly (journal writes) were cut.
    assert began == ended <= 3, f"{began} outages logged, {ended} ends"


def _sleep(seconds: float) -> Op[Rows]:
    return (yield Statement(f"select pg_sleep({seconds}) as slept"))


def test_a_call_on_a_half_open_connection_fails_and_the_next_reconnects(
    pg_store: Store, proxy: SilentableProxy
) -> None:
    """Not at its deadline (ten minutes here): the server says the call's session is
    gone, so the call fails as the store being unavailable, and the next one works."""
    backend = PostgresBackend(proxy.url, schema=pg_store.schema, call_timeout=600)

    async def scenario() -> None:
        try:
            await backend.execute_async(_sleep(0))
            call = asyncio.ensure_future(backend.execute_async(_sleep(0.5)))
            await asyncio.sleep(0.1)
            proxy.half_open()
            with pytest.raises(errors.StoreUnavailable):
                await asyncio.wait_for(call, 60)
            assert await backend.execute_async(_sleep(0)) == [{"slept": ""}]
        finally:
            await backend.aclose()

    asyncio.run(scenario())


def test_a_slow_call_on_a_live_session_is_left_alone(pg_store: Store) -> None:
    """A statement that takes long (a lock wait, say) is asked about, found alive, and
    let finish."""
    backend = PostgresBackend(pg_store.url, schema=pg_store.schema, probe_after=0.1)

    async def scenario() -> None:
        try:
            assert await backend.execute_async(_sleep(1.5)) == [{"slept": ""}]
        finally:
            await backend.aclose()

    asyncio.run(scenario())


def test_a_worker_stops_within_its_grace_while_the_network_is_silent(
    pg_store: Store, proxy: SilentableProxy
) -> None:
    witness = Witness()
    app = steps_app(pg_store, witness)
    start(pg_store, 40)
    poller = proxied_poller(app, pg_store, proxy, concurrency=4, shutdown_grace=1)
    with poller_thread(app, poller=poller):  # which fails unless it stops within 15 s
        wait_until(lambda: len(witness.started) >= 5, 60, "no progress")
        proxy.silence()
        time.sleep(0.5)


def test_a_blocking_call_gives_up_at_its_deadline_while_the_network_is_silent(
    pg_store: Store, proxy: SilentableProxy
) -> None:
    """A sync client's call (a blocking socket) is cut off at its deadline, fails with
    ``StoreUnavailable`` saying so, and the next call, once the network is back, works."""
    backend = PostgresBackend(proxy.url, schema=pg_store.schema, call_timeout=2.0)
    with Client(pg_store.url, schema=pg_store.schema) as direct:
        run_id = direct.start(TYPE, {"n": 1}).id
    try:
        assert backend.execute(backend.get_run(run_id)) is not None
        proxy.silence()
        failed: list[BaseException] = []

        def call() -> None:
            try:
                backend.execute(backend.get_run(run_id))
            except BaseException as exc:
                failed.append(exc)

        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        caller.join(30)
        assert not caller.is_alive(), "the blocking call was still waiting after 30 s"
        assert isinstance(failed[0], errors.StoreUnavailable), failed
        assert "did not answer within 2s" in str(failed[0])
        proxy.unsilence()
        assert backend.execute(backend.get_run(run_id)) is not None
    finally:
        backend.close()


def test_an_async_call_gives_up_at_its_deadline_while_the_network_is_silent(
    pg_store: Store, proxy: SilentableProxy
) -> None:
    """An async call waiting on a silent network fails at its deadline with
    ``StoreUnavailable`` saying so, and the next call, once the network is back, works."""
    backend = PostgresBackend(proxy.url, schema=pg_store.schema, call_timeout=2.0)

    async def scenario() -> None:
        try:
            await backend.execute_async(_sleep(0))
            proxy.silence()
            with pytest.raises(errors.StoreUnavailable, match="did not answer within 2s"):
                await asyncio.wait_for(backend.execute_async(_sleep(0)), 30)
            proxy.unsilence()
            assert await backend.execute_async(_sleep(0)) == [{"slept": ""}]
        finally:
            await backend.aclose()

    asyncio.run(scenario())


def test_an_async_call_cancelled_while_the_network_is_silent_ends_its_caller_at_once(
    pg_store: Store, proxy: SilentableProxy
) -> None:
    """Cancelling the caller of a call stuck on a silent socket does not wait for that
    socket (far from the call's deadline): the caller ends cancelled while the network is
    still silent, and the call left behind is ended by ``aclose``."""
    backend = PostgresBackend(proxy.url, schema=pg_store.schema, call_timeout=600)

    async def scenario() -> None:
        try:
            await backend.execute_async(_sleep(0))
            proxy.silence()
            caller = asyncio.ensure_future(backend.execute_async(_sleep(0)))
            await asyncio.sleep(0.3)
            assert not caller.done()
            caller.cancel()
            done, _ = await asyncio.wait({caller}, timeout=30)
            assert caller in done and caller.cancelled()
            # before the call it left, which is still waiting on its silent socket
            left = list(backend._abandoned)
            assert len(left) == 1 and not left[0].done()
        finally:
            await backend.aclose()
            proxy.unsilence()

    asyncio.run(scenario())


def test_a_shorter_deadline_is_kept_while_calls_with_longer_ones_come_and_go(
    pg_store: Store, proxy: SilentableProxy
) -> None:
    """The watchdog, kept busy by calls due to be looked at only after 30 s, still cuts a
    call whose deadline is 1 s at its deadline: a call due sooner than the watchdog would
    look next wakes it."""
    busy = PostgresBackend(pg_store.url, schema=pg_store.schema, probe_after=30)
    short = PostgresBackend(proxy.url, schema=pg_store.schema, call_timeout=1.0, probe_after=30)
    done = threading.Event()

    def keep_busy() -> None:
        while not done.is_set():
            busy.execute(_sleep(0))

    caller = threading.Thread(target=keep_busy, daemon=True)
    try:
        assert short.execute(_sleep(0)) == [{"slept": ""}]  # its pool, connected
        time.sleep(2.5)  # two leads of 1 s: the watchdog has looked, and sleeps
        caller.start()  # from now on it looks every 30 s
        time.sleep(0.3)
        proxy.silence()
        began = time.monotonic()
        with pytest.raises(errors.StoreUnavailable, match="did not answer within 1s"):
            short.execute(_sleep(0))
        assert time.monotonic() - began < 15, "the call was cut long after its deadline"
    finally:
        done.set()
        proxy.unsilence()
        caller.join(30)
        busy.close()
        short.close()


def test_a_sync_clients_call_on_a_half_open_connection_fails_soon_and_the_next_works(
    pg_store: Store, proxy: SilentableProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """A blocking ``Client.start`` on a connection whose server side is gone fails within
    seconds, not at its deadline (ten minutes here); it says why, and the client's next
    call, on a fresh connection, works. The start did not reach the server, so it is not
    stored, and retrying it with its idempotency key starts it once."""
    backend = PostgresBackend(proxy.url, schema=pg_store.schema, call_timeout=600)
    with Client(backend=backend) as client:
        first = client.start(TYPE, {"n": 1})
        calls = [threading.Thread(target=backend.execute, args=(_sleep(0.2),)) for _ in "abc"]
        for call in calls:  # at once: the pool holds three connections, idle...
            call.start()
        for call in calls:
            call.join()
        proxy.half_open()  # ... whose server side is gone
        began = time.monotonic()
        with pytest.raises(errors.StoreUnavailable, match="no longer has this connection's"):
            client.start(TYPE, {"n": 2}, idempotency_key="half-open")
        assert time.monotonic() - began < 30, "the call waited for its deadline"
        assert client.get(first.id).id == first.id  # the pool of dead connections went
        again = client.start(TYPE, {"n": 2}, idempotency_key="half-open")
        assert again.created
    assert any("half-open" in r.getMessage() for r in caplog.records), "the cut was not logged"


def test_a_slow_blocking_call_on_a_live_session_is_left_alone(pg_store: Store) -> None:
    """Asked about several times (at 0.1, 0.2, 0.4, 0.8 and 1.6 s), the session is found
    alive each time, and the statement finishes."""
    backend = PostgresBackend(pg_store.url, schema=pg_store.schema, probe_after=0.1)
    asked: list[int] = []
    probe = backend._liveness
    dead = probe.dead_blocking

    def counted(conns: list[Any]) -> list[Any]:
        asked.append(len(conns))
        return dead(conns)

    probe.dead_blocking = counted  # type: ignore[method-assign]
    try:
        assert backend.execute(_sleep(2)) == [{"slept": ""}]
    finally:
        backend.close()
    assert len(asked) >= 3, f"the server was asked {len(asked)} times"


def test_a_sync_transaction_on_a_half_open_connection_is_cut_by_the_next_probe(
    pg_store: Store, proxy: SilentableProxy
) -> None:
    """A transaction's connection (a transactional step's, in a ``def`` handler) has no
    deadline: it is checked whenever a probe runs, here one for a slow call beside it."""
    backend = PostgresBackend(proxy.url, schema=pg_store.schema, probe_after=0.2)
    try:
        with pytest.raises(psycopg.OperationalError), backend.transaction() as conn:
            proxy.half_open()
            beside = threading.Thread(target=backend.execute, args=(_sleep(0.5),))
            beside.start()  # a fresh connection, live: probed at 0.2 s, not cut
            conn.execute("select 1")
        beside.join()
        assert backend.execute(_sleep(0)) == [{"slept": ""}]
    finally:
        backend.close()
