"""Debounced starts (docs/flow-control.md), on both stores and both clients: repeated
starts with one key collapse into one run, due a window after the last call, with the
last call's payload, capped by ``max_wait``; a claim ends the collapse; concurrent
callers, and callers racing a worker's claims, are checked from the database.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import Store, poller_thread
from test_client import AsyncFace, Producer

from simpleworkflow import App, Client, RunStatus, cli, errors
from simpleworkflow.backends.records import Claim

TYPE = "accounts.profile.reindex.v1"
OTHER = "accounts.profile.notify.v1"


@pytest.fixture(params=["sync", "async"])
def producer(request: pytest.FixtureRequest, store: Store) -> Iterator[Producer]:
    face: Client | AsyncFace
    face = store.client() if request.param == "sync" else AsyncFace(store.async_client())
    try:
        yield face
    finally:
        face.close()


def events(store: Store, run_id: str) -> list[str]:
    rows = store.sql(
        "select event_type from workflow_event where workflow_id = ? order by id", run_id
    )
    return [row[0] for row in rows]


def age(store: Store, run_id: str, seconds: float) -> None:
    """Move the run's first call ``seconds`` into the past, behind the client's back."""
    if store.kind == "sqlite":
        store.sql(
            "update workflow_run set created_at = strftime('%Y-%m-%d %H:%M:%f', created_at, ?)"
            " where id = ?",
            f"-{seconds} seconds",
            run_id,
        )
    else:
        store.sql(
            "update workflow_run set created_at = created_at - make_interval(secs => ?)"
            " where id = ?",
            seconds,
            run_id,
        )


def claim_due(store: Store, type: str = TYPE) -> list[str]:
    """Claim what is due of ``type``, as a worker would; the ids claimed."""
    backend = store.backend()
    try:
        claim = Claim(worker_id="w", types=(type,), limit=10, lease_seconds=30)
        return [lease.run.id for lease in backend.execute(backend.claim(claim))]
    finally:
        backend.close()


def test_starts_with_one_key_collapse_into_one_run_with_the_last_payload(
    store: Store, producer: Producer
) -> None:
    first = producer.start(TYPE, {"v": 1}, debounce=("user:42", "30s"))
    second = producer.start(TYPE, {"v": 2}, debounce=("user:42", "30s"), priority=5)
    third = producer.start(TYPE, {"v": 3}, debounce={"key": "user:42", "window": 30})
    assert first.id == second.id == third.id  # every caller learns the one run
    assert (first.created, second.created, third.created) == (True, False, False)
    assert store.count() == 1
    stored = producer.get(first.id)
    assert stored.payload == {"v": 3} == third.payload  # the last call's, options too
    assert stored.priority == 100 and second.priority == 5
    assert stored == third
    assert events(store, first.id) == ["created", "debounced", "debounced"]
    assert producer.events(first.id)[-1].data["key"] == "user:42"


def test_each_call_starts_the_window_again(producer: Producer) -> None:
    first = producer.start(TYPE, debounce=("k", "30s"))
    assert first.run_at - first.created_at == timedelta(seconds=30)
    later = producer.start(TYPE, debounce=("k", "30s"))
    # due one window after this call (the store's clock wrote both times)
    assert later.run_at - later.updated_at == timedelta(seconds=30)
    assert later.run_at >= first.run_at and later.created_at == first.created_at
    shorter = producer.start(TYPE, debounce=("k", "1s"))  # the last call's window counts
    assert shorter.run_at - shorter.updated_at == timedelta(seconds=1)


def test_max_wait_caps_how_long_the_calls_can_hold_the_run_back(
    store: Store, producer: Producer
) -> None:
    spec = {"key": "k", "window": "60s", "max_wait": "120s"}
    first = producer.start(TYPE, {"v": 1}, debounce=spec)
    age(store, first.id, 100)  # the first call was 100 s ago
    capped = producer.start(TYPE, {"v": 2}, debounce=spec)
    stored = producer.get(first.id)
    assert capped.run_at == stored.run_at == stored.created_at + timedelta(seconds=120)
    assert not claim_due(store)  # due in 20 s, not 60
    age(store, first.id, 100)  # 200 s ago: past the cap, so due at once
    producer.start(TYPE, {"v": 3}, debounce=spec)
    assert claim_due(store) == [first.id]
    assert producer.get(first.id).payload == {"v": 3}


def test_keys_are_held_per_type_and_apart(store: Store, producer: Producer) -> None:
    a = producer.start(TYPE, debounce=("a", "30s"))
    b = producer.start(TYPE, debounce=("b", "30s"))
    other = producer.start(OTHER, debounce=("a", "30s"))
    plain = producer.start(TYPE)  # no debounce: never collapses
    assert len({a.id, b.id, other.id, plain.id}) == 4
    assert store.count() == 4


def test_once_claimed_the_next_call_starts_a_fresh_run(store: Store, producer: Producer) -> None:
    first = producer.start(TYPE, {"v": 1}, debounce=("k", "1ms"))
    time.sleep(0.05)  # let it come due
    assert claim_due(store) == [first.id]
    fresh = producer.start(TYPE, {"v": 2}, debounce=("k", "30s"))
    assert fresh.id != first.id and fresh.created
    assert producer.get(first.id).payload == {"v": 1}  # the claimed run keeps its payload
    # The claimed run left the debounce: given back to the queue (a retry, a release) it
    # takes no other call's payload.
    assert store.sql("select debounce_key from workflow_run where id = ?", first.id) == [(None,)]
    store.sql("update workflow_run set status = 'pending' where id = ?", first.id)
    assert producer.start(TYPE, {"v": 3}, debounce=("k", "30s")).id == fresh.id


def test_a_cancelled_or_deleted_run_is_not_joined(producer: Producer) -> None:
    cancelled = producer.start(TYPE, debounce=("k", "30s"))
    producer.cancel(cancelled.id)
    deleted = producer.start(TYPE, debounce=("k", "30s"))
    assert deleted.id != cancelled.id and deleted.created
    producer.delete(deleted.id)
    last = producer.start(TYPE, debounce=("k", "30s"))
    assert last.id not in (cancelled.id, deleted.id) and last.created


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"debounce": ("", "30s")}, "non-empty string"),
        ({"debounce": (42, "30s")}, "non-empty string"),
        ({"debounce": ("k\x00", "30s")}, "NUL"),
        ({"debounce": ("k" * 513, "30s")}, "at most 512"),
        ({"debounce": ("k", -5)}, "non-negative"),
        ({"debounce": ("k", 0)}, "more than 0"),
        ({"debounce": ("k", "soon")}, "cannot read debounce window"),
        ({"debounce": {"key": "k", "window": "5m", "max_wait": "1m"}}, "at least the window"),
        ({"debounce": {"key": "k", "window": "5m", "maxwait": "1h"}}, "unknown debounce field"),
        ({"debounce": {"key": "k"}}, "debounce takes"),
        ({"debounce": ("k", "30s", "5m")}, "debounce takes"),
        ({"debounce": "k"}, "debounce takes"),
        ({"debounce": ("k", "30s"), "idempotency_key": "i"}, "idempotency_key cannot"),
        ({"debounce": ("k", "30s"), "delay": "1m"}, "delay cannot"),
    ],
)
def test_bad_debounce_is_refused_and_writes_nothing(
    store: Store, producer: Producer, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(errors.InvalidArgument, match=message):
        producer.start(TYPE, **options)
    assert store.count() == 0


def test_start_many_refuses_debounce(store: Store, producer: Producer) -> None:
    with pytest.raises(errors.InvalidArgument, match="use start"):
        producer.start_many([(TYPE, {}), {"type": TYPE, "debounce": ("k", "30s")}])
    assert store.count() == 0


def test_a_thousand_concurrent_calls_collapse_into_one_run(store: Store) -> None:
    """The issue's figure: 1,000 calls from 10 threads, each with its own client (its own
    connections), at once; one row, and every call accounted for in its audit trail."""
    threads, per_thread = 10, 100
    barrier = threading.Barrier(threads)
    returned: list[tuple[str, bool | None]] = []

    def call(n: int) -> None:
        with store.client() as client:
            barrier.wait()
            for i in range(per_thread):
                run = client.start(TYPE, {"n": n * per_thread + i}, debounce=("burst", "1h"))
                returned.append((run.id, run.created))

    workers = [threading.Thread(target=call, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    [(run_id,)] = store.sql("select id from workflow_run")
    assert {str(run_id)} == {r for r, _ in returned} and len(returned) == 1000
    assert [created for _, created in returned].count(True) == 1
    trail = events(store, str(run_id))
    assert trail.count("created") == 1 and trail.count("debounced") == 999


def test_calls_racing_claims_each_land_in_exactly_one_run(store: Store) -> None:
    """With a window of a millisecond a worker claims runs while calls arrive: each call
    joins a run no worker has claimed yet, or makes a new one; none joins a claimed run
    (that would lose its payload)."""
    calls, threads = 120, 4
    returned: dict[str, list[int]] = {}
    lock = threading.Lock()
    done = threading.Event()
    claims = [0]  # runs the claimer took

    def call(n: int) -> None:
        # At least `calls` calls, and on until claims came between them twice (a loaded
        # machine can starve the claimer of SQLite's write lock for a while); at most 40x.
        with store.client() as client:
            for i in range(n, calls * 40, threads):
                if i >= calls and claims[0] >= 2:
                    return
                run = client.start(TYPE, {"n": i}, debounce=("race", "1ms"))
                with lock:
                    returned.setdefault(run.id, []).append(i)
                time.sleep(0.002)  # gaps in which the run comes due

    def claim() -> None:
        backend = store.backend()
        request = Claim(worker_id="w", types=(TYPE,), limit=10, lease_seconds=30)
        try:
            while not done.is_set():
                claims[0] += len(backend.execute(backend.claim(request)))
                time.sleep(0.001)  # on SQLite, leave the callers the write lock
        finally:
            backend.close()

    claimer = threading.Thread(target=claim)
    claimer.start()
    callers = [threading.Thread(target=call, args=(n,)) for n in range(threads)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    done.set()
    claimer.join()
    with store.client() as client:
        for run_id, numbers in returned.items():
            trail = events(store, run_id)
            assert 1 + trail.count("debounced") == len(numbers)
            if "leased" in trail:  # claimed: every call joined before the claim
                assert "debounced" not in trail[trail.index("leased") :]
            assert client.get(run_id).payload["n"] in numbers
    assert len(returned) > 1  # claims did come between calls
    made = [n for numbers in returned.values() for n in numbers]
    assert len(made) == len(set(made)) and set(range(calls)) <= set(made)  # each in one run
    pending = store.sql("select count(*) from workflow_run where debounce_key is not null")
    assert pending[0][0] <= 1


def test_a_worker_runs_the_collapsed_run_once_with_the_last_payload(store: Store) -> None:
    app = App(store.url, schema=store.schema)
    seen: list[Any] = []

    @app.workflow(TYPE)
    def reindex(payload: Any) -> Any:
        seen.append(payload)
        return payload

    with store.client() as client, poller_thread(app, poll_interval=0.1):
        runs = [client.start(TYPE, {"v": v}, debounce=("user:7", "300ms")) for v in range(5)]
        done = client.wait(runs[0].id, timeout="20s")
    assert done.status is RunStatus.SUCCEEDED and done.result == {"v": 4}
    assert seen == [{"v": 4}] and store.count() == 1


def test_calls_that_push_the_run_later_wake_no_worker(store: Store) -> None:
    """Each wake-up makes idle workers claim: a call that moves the due time later sends
    none (the one they heard of comes first, and they poll after it), a call that moves
    it earlier sends one."""
    if store.kind != "postgres":
        pytest.skip("SQLite has no notifications; its workers watch the file instead")
    with psycopg.connect(store.url, autocommit=True) as listener:
        listener.execute("listen simpleworkflow")
        with store.client() as client:
            client.start(TYPE, debounce=("k", "1h"))
            for _ in range(5):
                client.start(TYPE, debounce=("k", "1h"))
            client.start(TYPE, debounce=("k", "10m"))  # earlier
            client.start(OTHER)
        payloads = [note.payload for note in listener.notifies(timeout=5, stop_after=3)]
    first, earlier = (payload.split(" ") for payload in payloads[:2])
    assert first[:3] == earlier[:3] == ["wake", store.schema, TYPE]
    assert 3590 < float(first[3]) - time.time() < 3610
    assert 590 < float(earlier[3]) - time.time() < 610
    assert payloads[2] == f"wake {store.schema} {OTHER}"


def test_the_cli_debounces(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    def start(*flags: str) -> tuple[int, str, str]:
        argv = ["-d", store.url, "--schema", store.schema, "start", TYPE, "--json", *flags]
        code = cli.main(argv)
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = start("-p", '{"v": 1}', "--debounce", "user:7", "30s")
    assert code == 0
    first = json.loads(out)
    code, out, _ = start(
        "-p", '{"v": 2}', "--debounce", "user:7", "1m", "--debounce-max-wait", "5m"
    )
    again = json.loads(out)
    assert (again["id"], again["created"], again["payload"]) == (first["id"], False, {"v": 2})
    code, _, err = start("--debounce-max-wait", "5m")
    assert code != 0 and "needs --debounce" in err
    code, _, err = start("--debounce", "user:7", "0s")
    assert code != 0 and "debounce window" in err
    assert store.count() == 1


def test_the_api_debounces(store: Store) -> None:
    from api_helpers import PREFIX, Api

    api = Api(store)
    try:
        debounce = {"key": "user:7", "window": "30s"}
        body: dict[str, Any] = {"type": TYPE, "debounce": debounce}
        first = api.post(f"{PREFIX}/runs", json={**body, "payload": {"v": 1}})
        again = api.post(
            f"{PREFIX}/runs",
            json={**body, "payload": {"v": 2}, "debounce": {**debounce, "max_wait": 600}},
        )
        assert (first.status_code, again.status_code) == (201, 200)
        assert again.json()["id"] == first.json()["id"] and again.json()["payload"] == {"v": 2}
        bad = api.post(f"{PREFIX}/runs", json={**body, "idempotency_key": "k"})
        assert bad.status_code == 422 and "cannot go together" in bad.text
        batch = api.post(f"{PREFIX}/runs/batch", json={"runs": [body]})
        assert batch.status_code == 422 and "start_many does not debounce" in batch.text
        unknown = api.post(f"{PREFIX}/runs", json={**body, "debounce": {"key": "k", "win": 3}})
        assert unknown.status_code == 422
    finally:
        api.close()
    assert store.count() == 1


def documented_sql() -> dict[str, str]:
    """The plain SQL of docs/flow-control.md's "From other languages", by store."""
    doc = (Path(__file__).parents[2] / "docs" / "flow-control.md").read_text()
    section = doc.split("### From other languages", 1)[1]
    postgres, sqlite = re.findall(r"```sql\n(.*?)```", section, re.S)
    return {"postgres": postgres, "sqlite": sqlite}


def test_the_documented_sql_debounces_with_the_clients(store: Store) -> None:
    """Another language's producer, with the statement as the docs write it, joins the
    run a client started, and the client's calls join its run."""
    statement = documented_sql()[store.kind]
    params = {"key": "user:42", "window_seconds": 30, "max_wait_seconds": None}

    def plain_sql() -> str:
        if store.kind == "sqlite":
            with sqlite3.connect(store.url.removeprefix("sqlite:///")) as lite:
                return str(lite.execute(statement, params).fetchone()[0])
        text = re.sub(r":(\w+)", r"%(\1)s", statement.replace("workflow.", f'"{store.schema}".'))
        with psycopg.connect(store.url, autocommit=True) as conn:
            row = conn.execute(text.encode(), params).fetchone()
            assert row is not None
            return str(row[0])

    with store.client() as client:
        first = client.start("search.profile.reindex.v1", {"v": 1}, debounce=("user:42", "30s"))
        assert plain_sql() == first.id
        assert client.get(first.id).payload == {"user_id": 42}
        again = client.start("search.profile.reindex.v1", {"v": 2}, debounce=("user:42", "30s"))
        assert again.id == first.id
        client.cancel(first.id)
        fresh = plain_sql()
        assert fresh != first.id
        assert client.start("search.profile.reindex.v1", debounce=("user:42", "30s")).id == fresh
    assert store.count() == 2
