"""The Go runtime (runtimes/go/) beside the Python one, on the suite's Postgres.

The Go program `swgo` (runtimes/go/cmd/swgo) is built once per session and driven as a
producer (`swgo start`, `cancel`, `get`) and as a worker process whose handler does what
each run's payload asks (sleep, fail n times, fail for good) and notes each attempt in a
ledger file. Python workers run in-process on threads and note theirs in the same
ledger, so that a run executed twice, or never, shows there. Postgres only: the Go
runtime speaks to the Postgres store (SQLite has no other-process clients).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import Store, make_store, poller_thread, stop_processes
from worker_app import wait_until

from simpleworkflow import App, Context
from simpleworkflow.retry import RetryPolicy

ROOT = Path(__file__).resolve().parents[2]
GO_MODULE = ROOT / "runtimes" / "go"
DEBIAN_PQ = Path("/usr/share/gocode/src/github.com/lib/pq")
INVOICE = "billing.invoice.v1"
REFUND = "billing.refund.v1"
OCR = "content.ocr.v1"
QUICK = RetryPolicy(backoff="fixed", base=0.2, jitter=0)


def go_env() -> dict[str, str]:
    """Build offline: Debian's lib/pq through the module's go.work.debian, no proxy."""
    return {
        **os.environ,
        "GOFLAGS": "",
        "CGO_ENABLED": "0",
        "GOWORK": str(GO_MODULE / "go.work.debian"),
        "GOPROXY": "off",
    }


@pytest.fixture(scope="session")
def swgo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test program, built once per session."""
    if shutil.which("go") is None:
        pytest.skip("no Go toolchain (install golang-go and golang-github-lib-pq-dev)")
    if not DEBIAN_PQ.is_dir():
        pytest.skip(f"no lib/pq at {DEBIAN_PQ} (install golang-github-lib-pq-dev)")
    binary = tmp_path_factory.mktemp("go") / "swgo"
    subprocess.run(
        ["go", "build", "-o", str(binary), "./cmd/swgo"],
        cwd=GO_MODULE,
        env=go_env(),
        check=True,
        timeout=600,
    )
    return binary


@pytest.fixture
def pg(tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    return make_store("postgres", tmp_path, request).migrate()


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.jsonl"


def entries(path: Path, event: str | None = None, **match: Any) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines(keepends=True)]
    return [
        e
        for e in lines
        if (event is None or e["event"] == event) and all(e.get(k) == v for k, v in match.items())
    ]


class Fleet:
    """The Go processes of one test, stopped at its end."""

    def __init__(self, swgo: Path, store: Store, ledger: Path) -> None:
        self.swgo, self.store, self.ledger = swgo, store, ledger
        self.procs: list[subprocess.Popen[str]] = []

    def env(self) -> dict[str, str]:
        return {**self.store.env, "SWGO_LEDGER": str(self.ledger)}

    def run(self, *args: str) -> Any:
        out = subprocess.run(
            [str(self.swgo), *args], env=self.env(), capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        return [json.loads(line) for line in out.stdout.splitlines()]

    def start(self, type: str, payload: Any = None, *args: str) -> str:
        rows = self.run("start", "-type", type, "-payload", json.dumps(payload or {}), *args)
        return str(rows[0]["id"])

    def worker(self, types: list[str], *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [str(self.swgo), "worker", "-types", ",".join(types), *args],
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", "the Go worker did not start"
        return proc


@pytest.fixture
def fleet(swgo: Path, pg: Store, ledger_path: Path) -> Iterator[Fleet]:
    fleet = Fleet(swgo, pg, ledger_path)
    try:
        yield fleet
    finally:
        stop_processes(fleet.procs)


def python_app(store: Store, ledger: Path, *types: str) -> App:
    """A Python app whose handlers note each attempt in the ledger, as swgo's do, and
    sleep ``py_sleep`` seconds (the Go handler sleeps ``sleep``)."""
    app = App(store.url, schema=store.schema, retry=QUICK)

    def note(event: str, ctx: Context) -> None:
        line = {"event": event, "run": ctx.run_id, "worker": ctx.worker_id, "runtime": "python"}
        with ledger.open("a") as f:
            f.write(json.dumps(line) + "\n")

    for type_name in types:

        @app.workflow(type_name)
        def handle(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
            note("started", ctx)
            time.sleep(float(payload.get("py_sleep", 0)))
            note("finished", ctx)
            return {"runtime": "python"}

    return app


def status(store: Store, run_id: str) -> str:
    return str(store.sql("select status from workflow_run where id = ?", run_id)[0][0])


def events(store: Store, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    rows = store.sql(
        "select event_type, data from workflow_event where workflow_id = ? order by id", run_id
    )
    return [(str(kind), data) for kind, data in rows]


def finished(store: Store, run_id: str, timeout: float = 60) -> str:
    wait_until(
        lambda: status(store, run_id) in ("succeeded", "failed", "cancelled"),
        timeout,
        lambda: f"run {run_id} is still {status(store, run_id)}: {events(store, run_id)}",
    )
    return status(store, run_id)


# -- the package's own checks ------------------------------------------------------------


def test_go_vet_and_the_packages_unit_tests_pass(swgo: Path) -> None:
    for command in (["go", "vet", "./..."], ["go", "test", "-count=1", "./..."]):
        out = subprocess.run(
            command, cwd=GO_MODULE, env=go_env(), capture_output=True, text=True, timeout=600
        )
        assert out.returncode == 0, f"{' '.join(command)}:\n{out.stdout}{out.stderr}"
    unformatted = subprocess.run(
        ["gofmt", "-l", "."], cwd=GO_MODULE, capture_output=True, text=True, check=True
    )
    assert unformatted.stdout == "", f"not gofmt-formatted: {unformatted.stdout}"


def test_every_statement_of_the_go_runtime_is_in_the_schema_document() -> None:
    """The Go runtime is written from docs/schema.md alone: each statement it sends
    appears there verbatim (spacing aside)."""
    source = (GO_MODULE / "statements.go").read_text()
    statements = re.findall(r"^const (sql\w+) = `(.*?)`", source, flags=re.S | re.M)
    assert len(statements) >= 12
    document = " ".join((ROOT / "docs" / "schema.md").read_text().split())
    missing = [name for name, text in statements if " ".join(text.split()) not in document]
    assert missing == [], (
        f"statements of runtimes/go/statements.go not in docs/schema.md: {missing}"
    )


# -- the contract ------------------------------------------------------------------------


def test_a_go_worker_claims_its_prefixes_only_and_writes_the_audit_trail(fleet: Fleet) -> None:
    store = fleet.store
    with store.client() as client:
        invoice = client.start(INVOICE, {"order": 7}).id
        ocr = client.start(OCR, {"page": 1}).id
    fleet.worker([INVOICE, OCR], "-prefixes", "billing.%", "-id", "go-1")
    assert finished(store, invoice) == "succeeded"
    row = store.sql("select result, attempt, leased_by from workflow_run where id = ?", invoice)
    assert row[0] == ({"echo": {"order": 7}, "attempt": 1, "runtime": "go"}, 0, "go-1")
    trail = events(store, invoice)
    assert [kind for kind, _ in trail] == ["created", "leased", "started", "succeeded"]
    assert trail[1][1]["worker_id"] == trail[3][1]["worker_id"] == "go-1"
    assert trail[3][1]["attempt"] == 1
    assert not any("source" in data for _, data in trail), "the trigger wrote an event"
    # content.% is not among its prefixes: the OCR run waits, and is not registered
    assert status(store, ocr) == "pending"
    registry = dict(store.sql("select workflow_name, runtime from workflow_registry"))
    assert registry == {INVOICE: "go"}
    seen = store.sql(
        "select runtime, type_prefixes, concurrency, seen_until > now(), stopped_at "
        "from workflow_worker where worker_id = 'go-1'"
    )
    assert seen == [("go", ["billing.%"], 10, True, None)]


def test_registry_routing_both_ways(fleet: Fleet, ledger_path: Path) -> None:
    """A type the registry gives to python is never claimed by a Go worker that has a
    handler for it, and a type it gives to go never by a Python worker."""
    store = fleet.store
    with store.client() as client:
        client.admin.set_runtime(INVOICE, "python")
        client.admin.set_runtime(REFUND, "go")
        runs = {t: [client.start(t).id for _ in range(6)] for t in (INVOICE, REFUND)}
    fleet.worker([INVOICE, REFUND], "-id", "go-1")
    with poller_thread(python_app(store, ledger_path, INVOICE, REFUND), worker_id="py-1"):
        for run_id in runs[INVOICE] + runs[REFUND]:
            assert finished(store, run_id) == "succeeded"
    for type_name, worker in ((INVOICE, "py-1"), (REFUND, "go-1")):
        holders = store.sql("select distinct leased_by from workflow_run where type = ?", type_name)
        assert holders == [(worker,)]
        for run_id in runs[type_name]:
            assert [e["worker"] for e in entries(ledger_path, "finished", run=run_id)] == [worker]


def test_paused_and_limited_types_wait_and_a_panic_fails_the_attempt(fleet: Fleet) -> None:
    """A Go worker claims no run of a paused type, nor of a type with a concurrency limit
    (only the Python worker counts those leases); a handler's panic is a failure."""
    store = fleet.store
    with store.client() as client:
        for type_name in (REFUND, OCR):
            client.admin.set_runtime(type_name, "go")
        client.admin.pause(REFUND)
        client.admin.set_concurrency(OCR, 5)
        paused, limited = client.start(REFUND).id, client.start(OCR).id
        panicking = client.start(INVOICE, {"panic": True}, max_attempts=1).id
        ordinary = client.start(INVOICE).id
    fleet.worker([INVOICE, REFUND, OCR], "-id", "go-1")
    assert finished(store, ordinary) == "succeeded"
    assert finished(store, panicking) == "failed"
    error = events(store, panicking)[-1][1]["error"]
    assert error["message"] == "handler panicked: asked to"
    time.sleep(1.5)  # a poll later
    assert (status(store, paused), status(store, limited)) == ("pending", "pending")


def test_idempotent_starts_across_runtimes(fleet: Fleet) -> None:
    first = fleet.run("start", "-type", INVOICE, "-key", "order:7")[0]
    again = fleet.run("start", "-type", INVOICE, "-key", "order:7", "-payload", '{"x": 1}')[0]
    assert first["created"] is True and again == {"id": first["id"], "created": False}
    with fleet.store.client() as client:
        assert client.start(INVOICE, idempotency_key="order:7").id == first["id"]
    run = fleet.run("get", first["id"])[0]
    assert (run["Status"], run["Payload"], run["IdempotencyKey"]) == ("pending", {}, "order:7")
    assert fleet.store.count() == 1


def test_bad_input_is_refused_naming_the_field(fleet: Fleet) -> None:
    out = subprocess.run(
        [str(fleet.swgo), "start", "-type", "Billing.v1"],
        env=fleet.env(),
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1 and out.stderr.startswith("swgo: type: ")
    assert fleet.store.count() == 0


def test_retries_back_off_then_fail_and_permanent_errors_do_not_retry(fleet: Fleet) -> None:
    store = fleet.store
    flaky = fleet.start(INVOICE, {"fail": 1})
    doomed = fleet.start(INVOICE, {"fail": 9}, "-max-attempts", "3")
    permanent = fleet.start(INVOICE, {"permanent": True}, "-max-attempts", "5")
    fleet.worker([INVOICE], "-retry", "200ms", "-id", "go-1")
    assert finished(store, flaky) == "succeeded"
    assert finished(store, doomed) == "failed"
    assert finished(store, permanent) == "failed"
    assert store.sql("select attempt from workflow_run where id = ?", flaky) == [(1,)]
    kinds = [kind for kind, _ in events(store, doomed)]
    assert kinds.count("retried") == 2 and kinds[-1] == "failed"
    assert store.sql("select attempt, last_error from workflow_run where id = ?", doomed) == [
        (3, "asked to fail attempt 3")
    ]
    # quadratic from 200 ms: 0.2 s after the first failure, 0.8 s after the second,
    # plus up to 10 % jitter, counted from the statement that recorded the failure
    waits = store.sql(
        "select extract(epoch from (data->>'retry_at')::timestamptz - created_at)::float8 "
        "from workflow_event where workflow_id = ? and event_type = 'retried' order by id",
        doomed,
    )
    assert [0.2 <= waits[0][0] <= 0.221, 0.8 <= waits[1][0] <= 0.881] == [True, True]
    retried = next(data for kind, data in events(store, doomed) if kind == "retried")
    assert retried["error"]["message"] == "asked to fail attempt 1"
    assert retried["worker_id"] == "go-1" and retried["attempt"] == 1
    last = events(store, permanent)[-1]
    assert last[0] == "failed" and last[1]["retryable"] is False and last[1]["attempt"] == 1


def test_cancelling_stops_a_running_go_handler_and_a_pending_run_never_runs(
    fleet: Fleet, ledger_path: Path
) -> None:
    store = fleet.store
    running = fleet.start(INVOICE, {"sleep": 120})
    fleet.worker([INVOICE], "-id", "go-1")
    wait_until(lambda: entries(ledger_path, "started", run=running), 30, "never started")
    assert fleet.run("cancel", running, "-reason", "customer left") == [{"cancelled": True}]
    wait_until(lambda: entries(ledger_path, "stopped", run=running), 30, "handler not stopped")
    assert entries(ledger_path, "stopped", run=running)[0]["outcome"] == "cancelled"
    waiting = fleet.start(INVOICE, {}, "-delay", "1h")
    with store.client() as client:
        client.cancel(waiting)
    assert fleet.run("cancel", waiting) == [{"cancelled": False}]  # already finished
    time.sleep(1.5)  # a heartbeat and a claim later: nothing more is written
    assert [kind for kind, _ in events(store, running)][-1] == "cancelled"
    assert events(store, running)[-1][1] == {"reason": "customer left"}
    assert status(store, running) == "cancelled" and status(store, waiting) == "cancelled"
    assert entries(ledger_path, run=waiting) == []


def test_a_deadline_fails_the_run_for_good_at_the_claim_or_while_it_runs(
    fleet: Fleet, ledger_path: Path
) -> None:
    store = fleet.store
    with store.client() as client:
        late = client.start(INVOICE, {"order": 1}, max_attempts=5).id
        slow = client.start(INVOICE, {"sleep": 120}, deadline="2s", max_attempts=5).id
    store.sql("update workflow_run set deadline = now() - interval '1 second' where id = ?", late)
    fleet.worker([INVOICE], "-id", "go-1")
    assert finished(store, late) == "failed" and finished(store, slow) == "failed"
    assert entries(ledger_path, run=late) == []  # its handler never ran
    for run_id in (late, slow):
        kind, data = events(store, run_id)[-1]
        assert (kind, data["error"]["type"], data["retryable"]) == (
            "failed",
            "DeadlineExceeded",
            False,
        )
        assert store.sql("select attempt from workflow_run where id = ?", run_id) == [(1,)]


def test_heartbeats_keep_a_run_longer_than_its_lease(fleet: Fleet) -> None:
    store = fleet.store
    run_id = fleet.start(INVOICE, {"sleep": 5})
    fleet.worker([INVOICE], "-lease", "2s", "-id", "go-1")
    assert finished(store, run_id) == "succeeded"
    trail = events(store, run_id)
    beats = [data for kind, data in trail if kind == "heartbeat"]
    assert beats and beats[0] == {"extended_by_seconds": 2.0, "worker_id": "go-1"}
    assert [kind for kind, _ in trail].count("leased") == 1  # never lost, never retaken


def test_a_dead_go_workers_lease_is_recovered_by_the_python_reaper(
    fleet: Fleet, ledger_path: Path
) -> None:
    store = fleet.store
    run_id = fleet.start(INVOICE, {"sleep": 120})
    go = fleet.worker([INVOICE], "-lease", "2s", "-id", "go-1")
    wait_until(lambda: entries(ledger_path, "started", run=run_id), 30, "never started")
    go.kill()
    go.wait(10)
    with store.client() as client:
        client.admin.set_runtime(INVOICE, "python")
    with poller_thread(python_app(store, ledger_path, INVOICE), worker_id="py-1"):
        assert finished(store, run_id) == "succeeded"
    recovered = [data for kind, data in events(store, run_id) if kind == "retried"]
    assert recovered[0]["reason"] == "lease_expired"
    assert (recovered[0]["worker_id"], recovered[0]["recovered_by"]) == ("go-1", "py-1")
    # its first crash is not charged: no failed attempt
    assert store.sql("select attempt, leased_by from workflow_run where id = ?", run_id) == [
        (0, "py-1")
    ]


def test_a_dead_python_workers_lease_is_recovered_by_the_go_reaper(fleet: Fleet) -> None:
    store = fleet.store
    with store.client() as client:
        run_id = client.start(INVOICE, {"order": 1}).id
    store.sql(  # as a Python worker that died holding it leaves it
        "update workflow_run set status = 'leased', leased_by = 'py-dead', "
        "lease_token = gen_random_uuid(), lease_until = now() - interval '1 second', "
        "logged_changes = logged_changes + 1 where id = ?",
        run_id,
    )
    fleet.worker([INVOICE], "-id", "go-1")
    assert finished(store, run_id) == "succeeded"
    kinds = [
        (kind, data.get("reason"), data.get("recovered_by")) for kind, data in events(store, run_id)
    ]
    assert ("retried", "lease_expired", "go-1") in kinds
    # a crash beside nothing else is not charged: counted, no failed attempt
    assert store.sql("select attempt, crashes from workflow_run where id = ?", run_id) == [(0, 1)]


def test_a_go_worker_whose_lease_was_taken_writes_nothing(fleet: Fleet, ledger_path: Path) -> None:
    store = fleet.store
    run_id = fleet.start(INVOICE, {"sleep": 2})
    fleet.worker([INVOICE], "-lease", "3s", "-id", "go-1")
    wait_until(lambda: entries(ledger_path, "started", run=run_id), 30, "never started")
    taken = store.sql(  # another worker took the run over (its lease had run out, say)
        "update workflow_run set leased_by = 'thief', lease_token = gen_random_uuid(), "
        "lease_until = now() + interval '1 hour' where id = ? returning lease_token",
        run_id,
    )[0][0]
    wait_until(
        lambda: (
            entries(ledger_path, "stopped", run=run_id)
            or entries(ledger_path, "finished", run=run_id)
        ),
        30,
        "the handler neither stopped nor finished",
    )
    time.sleep(1.5)  # its outcome, had it written one, and a heartbeat
    row = store.sql(
        "select status, leased_by, lease_token, result from workflow_run where id = ?", run_id
    )
    assert row == [("leased", "thief", taken, None)]
    after = [kind for kind, _ in events(store, run_id)][3:]
    assert set(after) <= {"heartbeat"}, after


def test_a_graceful_stop_gives_running_runs_back(fleet: Fleet, ledger_path: Path) -> None:
    store = fleet.store
    run_id = fleet.start(INVOICE, {"sleep": 120})
    go = fleet.worker([INVOICE], "-grace", "200ms", "-id", "go-1")
    wait_until(lambda: entries(ledger_path, "started", run=run_id), 30, "never started")
    go.send_signal(signal.SIGTERM)
    assert go.wait(30) == 0
    assert status(store, run_id) == "pending"
    kind, data = events(store, run_id)[-1]
    assert (kind, data) == ("released", {"worker_id": "go-1", "reason": "shutdown"})
    assert store.sql("select attempt, lease_token from workflow_run where id = ?", run_id) == [
        (0, None)
    ]
    stopped = store.sql(
        "select stopped_at is not null from workflow_worker where worker_id = 'go-1'"
    )
    assert stopped == [(True,)]


def test_a_notification_wakes_an_idle_go_worker(fleet: Fleet) -> None:
    """With an hour between polls, only the insert's notification can bring the run in."""
    fleet.worker([INVOICE], "-poll", "1h", "-id", "go-1")
    time.sleep(0.5)  # past its first claim
    with fleet.store.client() as client:
        run_id = client.start(INVOICE).id
    assert finished(fleet.store, run_id, timeout=30) == "succeeded"


def test_polling_finds_runs_no_notification_announced(fleet: Fleet) -> None:
    store = fleet.store
    fleet.worker([INVOICE], "-poll", "300ms", "-id", "go-1")
    time.sleep(0.5)
    # inserted with the triggers off (as a replica applies rows): no created event, no NOTIFY
    with psycopg.connect(store.url, autocommit=True) as conn:
        conn.execute(f'set search_path to "{store.schema}"'.encode())
        conn.execute(b"set session_replication_role = replica")
        row = conn.execute(
            b"insert into workflow_run (type, retention_fixed) values (%s, true) returning id",
            (INVOICE,),
        ).fetchone()
    assert row is not None
    run_id = str(row[0])
    assert finished(store, run_id, timeout=30) == "succeeded"


# -- a mixed fleet -----------------------------------------------------------------------


def done_once(store: Store, ledger: Path, run_ids: list[str]) -> None:
    """Every run succeeded, each after exactly one handler call that finished."""
    for run_id in run_ids:
        assert finished(store, run_id) == "succeeded"
    for run_id in run_ids:
        assert len(entries(ledger, "finished", run=run_id)) == 1, entries(ledger, run=run_id)


def test_python_producers_and_go_workers(fleet: Fleet, ledger_path: Path) -> None:
    with fleet.store.client() as client:
        runs = [client.start(INVOICE, {"n": i}).id for i in range(40)]
    fleet.worker([INVOICE], "-id", "go-1", "-concurrency", "4")
    fleet.worker([INVOICE], "-id", "go-2", "-concurrency", "4")
    done_once(fleet.store, ledger_path, runs)
    holders = {row[0] for row in fleet.store.sql("select leased_by from workflow_run")}
    assert holders <= {"go-1", "go-2"}


def test_a_go_worker_killed_mid_drain_loses_no_run_and_ends_none_twice(
    fleet: Fleet, ledger_path: Path
) -> None:
    """Runs the victim held are recovered by the other Go worker's reaper and run again
    there; each run succeeds once. Only the victim's may have run twice (its handler
    finished, its outcome not yet recorded when it died): at least once, never lost."""
    store = fleet.store
    payload = '{"sleep": 0.3}'
    started = fleet.run("start", "-type", INVOICE, "-n", "30", "-payload", payload)
    runs = [row["id"] for row in started]
    victim = fleet.worker([INVOICE], "-id", "go-victim", "-lease", "2s", "-concurrency", "5")
    wait_until(lambda: entries(ledger_path, "started", worker="go-victim"), 60, "victim idle")
    fleet.worker([INVOICE], "-id", "go-2", "-lease", "2s", "-concurrency", "5")

    def victim_holds_runs() -> bool:
        """Progress, and the victim in the middle of runs it started: under load it may
        start after the other worker has finished the first five on its own."""
        done = {e["run"] for e in entries(ledger_path, "finished", worker="go-victim")}
        mine = {e["run"] for e in entries(ledger_path, "started", worker="go-victim")}
        return len(entries(ledger_path, "finished")) >= 5 and bool(mine - done)

    wait_until(victim_holds_runs, 60, "no progress, or the victim never held a run")
    victim.kill()
    for run_id in runs:
        assert finished(store, run_id) == "succeeded"
    ends = store.sql(
        "select workflow_id, count(*) from workflow_event where event_type = 'succeeded' "
        "group by workflow_id"
    )
    assert sorted(str(run_id) for run_id, _ in ends) == sorted(runs)
    assert {count for _, count in ends} == {1}
    twice = {run_id for run_id in runs if len(entries(ledger_path, "finished", run=run_id)) > 1}
    assert twice <= {e["run"] for e in entries(ledger_path, "started", worker="go-victim")}
    # the runs the victim held when it died: leased by it, not ended by it
    held = store.sql(
        "select count(distinct workflow_id) from workflow_event l where l.event_type = 'leased' "
        "and l.data->>'worker_id' = 'go-victim' and not exists (select from workflow_event s "
        "where s.workflow_id = l.workflow_id and s.event_type = 'succeeded' "
        "and s.data->>'worker_id' = 'go-victim')"
    )[0][0]
    recovered = store.sql(
        "select count(*) from workflow_event where event_type = 'retried' "
        "and data->>'reason' = 'lease_expired' and data->>'recovered_by' = 'go-2'"
    )[0][0]
    assert recovered == held > 0


def test_go_producers_and_python_workers(fleet: Fleet, ledger_path: Path) -> None:
    store = fleet.store
    runs = [row["id"] for row in fleet.run("start", "-type", OCR, "-n", "30")]
    with poller_thread(python_app(store, ledger_path, OCR), worker_id="py-1"):
        done_once(store, ledger_path, runs)
    assert store.sql("select distinct result from workflow_run") == [({"runtime": "python"},)]


def test_a_type_moved_from_python_to_go_while_runs_are_pending(
    fleet: Fleet, ledger_path: Path
) -> None:
    store = fleet.store
    with store.client() as client:
        client.admin.set_runtime(INVOICE, "python")
        runs = [client.start(INVOICE, {"sleep": 0.05, "py_sleep": 0.05}).id for _ in range(60)]
        fleet.worker([INVOICE], "-id", "go-1", "-concurrency", "3")
        app = python_app(store, ledger_path, INVOICE)
        with poller_thread(app, worker_id="py-1", concurrency=2):
            wait_until(lambda: len(entries(ledger_path, "finished")) >= 10, 60, "python idle")
            client.admin.set_runtime(INVOICE, "go")
            done_once(store, ledger_path, runs)
    by = {e["worker"] for e in entries(ledger_path, "finished")}
    assert by == {"py-1", "go-1"}


# -- the benchmark -----------------------------------------------------------------------


def test_the_go_drain_benchmark_reports_both_runtimes(swgo: Path, postgres_url: str) -> None:
    """``python -m benchmarks.go_drain`` at its smallest."""
    command = [
        sys.executable, "-m", "benchmarks.go_drain",
        "--items", "200", "--rounds", "1", "--concurrency", "10",
        "--postgres-url", postgres_url, "--json",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    for key in ("go_runs_per_s", "python_runs_per_s", "go_cpu_us_per_run", "python_cpu_us_per_run"):
        assert report[key] > 0, key
    assert report["drain_ratio_go_to_python"] > 0
