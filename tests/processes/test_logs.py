"""Logs from inside runs: every record a handler logs, on its own loggers, says which run,
type, attempt and step it came from; ``worker --log-format json`` writes one JSON object
per line. In a worker of this process, and in a worker process started as an operator
starts it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Store, poller_thread, stop_processes
from worker_app import wait_until

from simpleworkflow import App, Context, RetryPolicy, RunStatus, config, logs

SCRIPT = Path(sys.executable).with_name("simpleworkflow")
FAST = RetryPolicy(backoff="fixed", base=0.05, jitter=0)
LOGGED = "logs.order.v1"

APP_MODULE = """
import logging

from simpleworkflow import App, RetryPolicy

app = App(retry=RetryPolicy(backoff="fixed", base=0.05, jitter=0))
log = logging.getLogger("shop")


def charge(order):
    log.info("charging %s", order)
    return "ch_" + order


@app.workflow("logs.cli.v1")
async def order(payload, ctx):
    log.info("taking order %s", payload["order"])
    await ctx.step("charge", charge, payload["order"])
    if ctx.attempt == 1:
        log.warning("failing on purpose")
        raise RuntimeError("the first attempt fails")
    return "done"
"""


class Kept(logging.Handler):
    """Keeps the records of the ``shop`` logger, filtered as the worker's handler is."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.addFilter(logs.RunContextFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def kept() -> Iterator[Kept]:
    handler = Kept()
    logger = logging.getLogger("shop")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)


def fields(record: logging.LogRecord) -> tuple[Any, ...]:
    return tuple(getattr(record, name) for name in logs.FIELDS)


@pytest.mark.parametrize("body", ["async", "def"])
def test_a_handlers_own_records_carry_its_run_attempt_and_step(
    store: Store, kept: Kept, body: str
) -> None:
    log = logging.getLogger("shop")
    app = App(store.url, schema=store.schema, retry=FAST)

    def charge_sync(order: str) -> str:
        log.info("charging in a thread")
        return f"ch_{order}"

    async def charge_async(order: str) -> str:
        log.info("charging on the loop")
        return f"ch_{order}"

    if body == "async":

        @app.workflow(LOGGED)
        async def order(payload: Any, ctx: Context) -> str:
            log.info("taking the order")
            await ctx.step("charge", charge_sync, "o1")
            await ctx.step("charge-async", charge_async, "o1")
            if ctx.attempt == 1:
                raise RuntimeError("the first attempt fails")
            log.info("done")
            return "ok"

    else:

        @app.workflow(LOGGED)
        def order_sync(payload: Any, ctx: Context) -> str:
            log.info("taking the order")
            ctx.step("charge", charge_sync, "o1")
            ctx.step("charge-async", charge_async, "o1")
            if ctx.attempt == 1:
                raise RuntimeError("the first attempt fails")
            log.info("done")
            return "ok"

    log.info("before any run")
    with app.client() as client, poller_thread(app, poll_interval=0.05):
        run_id = client.start(LOGGED).id
        assert client.wait(run_id, timeout=30).status is RunStatus.SUCCEEDED

    seen = [(record.getMessage(), *fields(record)) for record in kept.records]
    assert seen == [
        ("before any run", None, None, None, None),
        ("taking the order", run_id, LOGGED, 1, None),
        ("charging in a thread", run_id, LOGGED, 1, "charge"),
        ("charging on the loop", run_id, LOGGED, 1, "charge-async"),
        ("taking the order", run_id, LOGGED, 2, None),  # the steps are replayed
        ("done", run_id, LOGGED, 2, None),
    ]


def test_the_json_format_is_one_object_per_line_with_the_runs_fields() -> None:
    formatter = logs.JsonFormatter()
    record = logging.LogRecord("shop", logging.ERROR, __file__, 1, "two\nlines %s", ("x",), None)
    try:
        raise ValueError("boom")
    except ValueError:
        record.exc_info = sys.exc_info()
    record.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"  # as extra= or a filter sets it
    logs.RunContextFilter().filter(record)
    line = formatter.format(record)
    assert "\n" not in line
    out = json.loads(line)
    assert out["message"] == "two\nlines x"
    assert (out["level"], out["logger"], out["trace_id"]) == ("ERROR", "shop", record.trace_id)
    assert out["time"].endswith("Z")
    assert "ValueError: boom" in out["exception"]
    assert not {"run_id", "run_type", "attempt", "step"} & out.keys()  # not from a run


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_a_worker_process_logs_json_lines(store: Store, tmp_path: Path, how: str) -> None:
    (tmp_path / "shop.py").write_text(APP_MODULE)
    command = [str(SCRIPT), "-d", store.url, "--schema", store.schema, "worker", "shop:app"]
    env = dict(os.environ)
    if how == "flag":
        command += ["--log-format", "json"]
    else:
        env[config.LOG_FORMAT_ENV_VAR] = "json"
    worker = subprocess.Popen(
        [*command, "--poll-interval", "0.05"],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with store.client() as client:
            run_id = client.start("logs.cli.v1", {"order": "o7"}).id
            wait_until(lambda: client.get(run_id).is_terminal, 30, lambda: str(client.get(run_id)))
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=30)
    finally:
        stop_processes([worker])
    assert worker.returncode == 0, stderr
    lines = [json.loads(line) for line in stderr.splitlines()]  # every line is JSON
    assert {line["level"] for line in lines} >= {"INFO", "WARNING"}
    mine = [
        (line["message"], line.get("run_id"), line.get("attempt"), line.get("step"))
        for line in lines
        if line["logger"] == "shop"
    ]
    assert mine == [
        ("taking order o7", run_id, 1, None),
        ("charging o7", run_id, 1, "charge"),
        ("failing on purpose", run_id, 1, None),
        ("taking order o7", run_id, 2, None),
    ]
    assert all(line["run_type"] == "logs.cli.v1" for line in lines if line.get("run_id"))
    retried = [line for line in lines if "failed: the first attempt fails" in line["message"]]
    assert [line["run_id"] for line in retried] == [run_id]  # the worker's own line too


def test_an_unknown_log_format_is_refused_before_the_worker_starts(
    store: Store, tmp_path: Path
) -> None:
    (tmp_path / "shop.py").write_text(APP_MODULE)
    command = [str(SCRIPT), "-d", store.url, "--schema", store.schema, "worker", "shop:app"]
    env = {**os.environ, config.LOG_FORMAT_ENV_VAR: "xml"}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 2
    assert "SIMPLEWORKFLOW_LOG_FORMAT='xml': the log formats are text and json" in done.stderr
    done = subprocess.run(
        [*command, "--log-format", "xml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 2 and "invalid choice: 'xml'" in done.stderr


def test_the_text_format_ends_a_handlers_lines_with_its_run(store: Store) -> None:
    record = logging.LogRecord("shop", logging.INFO, __file__, 1, "charging", (), None)
    for name, value in zip(logs.FIELDS, ("r1", LOGGED, 2, "charge"), strict=True):
        setattr(record, name, value)
    line = logs.TextFormatter().format(record)
    assert line.endswith(f" INFO shop: charging [run r1 {LOGGED} attempt 2 step charge]")
    record.name = "simpleworkflow.worker"  # the worker's own lines name their run already
    assert logs.TextFormatter().format(record).endswith(" INFO simpleworkflow.worker: charging")
