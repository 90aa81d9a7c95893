"""A worker process for the benchmark: ``python -m benchmarks.worker URL SCHEMA CONCURRENCY``.

``CONCURRENCY`` 0 leaves the worker's own default.

It registers the benchmark's handlers and builds its poller, prints ``ready``, then waits
for a line on stdin before it starts claiming: imports and connections stay out of the
measured window, and several processes begin together. SIGTERM stops it gracefully.
With ``PROFILE_ENV`` set to a path, the worker runs under cProfile and writes its
statistics there when it stops (``python -m benchmarks.profile`` uses this).
``TRACING_ENV`` registers the tracing observer: ``api`` with no SDK configured (its spans
are no-ops), ``sdk`` with the SDK recording every span into a batch that goes nowhere.
``METRICS_ENV`` set to ``on`` counts and serves Prometheus metrics on a free port, as
``simpleworkflow worker --metrics-port`` does. ``ECHO_ENV`` set to ``on`` has the latency
handler also print ``started <payload's n> <time>`` on stdout, for a producer that reads
it rather than polling the store (``benchmarks.latency``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import cProfile
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks import stores
from simpleworkflow import App, Context, Observer
from simpleworkflow.cli.worker import serve_metrics
from simpleworkflow.models import Run

PROFILE_ENV = "SIMPLEWORKFLOW_BENCH_PROFILE"
TRACING_ENV = "SIMPLEWORKFLOW_BENCH_TRACING"
METRICS_ENV = "SIMPLEWORKFLOW_BENCH_METRICS"
ECHO_ENV = "SIMPLEWORKFLOW_BENCH_ECHO"
#: Milliseconds each run of ``stores.NOOP`` and ``stores.SYNC`` waits (``asyncio.sleep``,
#: ``time.sleep``), standing in for a handler's I/O; unset or 0: none.
HANDLER_MS_ENV = "SIMPLEWORKFLOW_BENCH_HANDLER_MS"
#: A path: the no-op handlers note when the worker entered ``around_attempt`` for each
#: call (just before it calls the handler, or queues it to a handler thread), when the
#: call began and when it returned (``time.perf_counter``), written there as JSON when
#: the worker stops (``benchmarks.slot_gaps``).
GAPS_ENV = "SIMPLEWORKFLOW_BENCH_GAPS"
#: The ``(entered, began, returned)`` of the handlers' calls, when ``GAPS_ENV`` is set.
_calls: list[tuple[float, float, float]] = []
_entered: contextvars.ContextVar[float] = contextvars.ContextVar("bench_entered", default=0.0)


class _NoteEntered(Observer):
    """Notes, for the handler to read, when the worker entered ``around_attempt``."""

    @contextlib.contextmanager
    def around_attempt(self, run: Run, worker_id: str) -> Iterator[None]:
        _entered.set(time.perf_counter())
        yield


async def _nothing() -> None:
    return None


def build_app(url: str, schema: str) -> App:
    """The handlers every case uses; each does no work of its own."""
    app = App(url, schema=schema, observers=_observers(os.environ.get(TRACING_ENV, "")))
    echo = os.environ.get(ECHO_ENV) == "on"
    _plain_handlers(app, float(os.environ.get(HANDLER_MS_ENV) or 0) / 1000)

    @app.workflow(stores.STEPS)
    async def steps(payload: Any, ctx: Context) -> None:
        for number in range(payload["steps"]):
            await ctx.step(f"s{number}", _nothing)

    @app.workflow(stores.LATENCY)
    async def latency(payload: Any) -> dict[str, float]:
        started = time.time()
        if echo:
            print(f"started {payload.get('n')} {started!r}", flush=True)
        return {"started": started}

    @app.workflow(stores.SIGNAL)
    async def signalled(payload: Any, ctx: Context) -> dict[str, float]:
        await ctx.wait_for_event("go", event="go")
        return {"resumed": time.time()}

    return app


def _plain_handlers(app: App, wait: float) -> None:
    """``stores.NOOP`` (``async def``) and ``stores.SYNC`` (``def``), each waiting
    ``wait`` seconds (none: returning at once)."""

    if wait:

        @app.workflow(stores.NOOP)
        async def noop(payload: Any) -> None:
            await asyncio.sleep(wait)

        @app.workflow(stores.SYNC)
        def blocking(payload: Any) -> None:
            time.sleep(wait)

    elif os.environ.get(GAPS_ENV):

        @app.workflow(stores.NOOP)
        async def noted(payload: Any) -> None:
            began = time.perf_counter()
            _calls.append((_entered.get(), began, time.perf_counter()))

        @app.workflow(stores.SYNC)
        def plain_noted(payload: Any) -> None:
            began = time.perf_counter()
            _calls.append((_entered.get(), began, time.perf_counter()))

    else:

        @app.workflow(stores.NOOP)
        async def noop(payload: Any) -> None:
            return None

        @app.workflow(stores.SYNC)
        def plain(payload: Any) -> None:
            return None


def _observers(tracing: str) -> list[Observer]:
    """The tracing observer, as ``TRACING_ENV`` asks (nothing: none)."""
    if tracing not in ("", "api", "sdk"):
        raise SystemExit(f"{TRACING_ENV}={tracing!r}: use api or sdk")
    if not tracing:
        return [_NoteEntered()] if os.environ.get(GAPS_ENV) else []
    from simpleworkflow.tracing import TracingObserver

    if tracing == "sdk":
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
        from opentelemetry.sdk.trace.export import SpanExportResult as Result

        class Nowhere(SpanExporter):
            def export(self, spans: object) -> Result:
                return Result.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Nowhere()))
        trace.set_tracer_provider(provider)
    return [TracingObserver()]


def main(argv: list[str]) -> None:
    url, schema, concurrency = argv[0], argv[1], int(argv[2])
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    slots: dict[str, Any] = {"concurrency": concurrency} if concurrency else {}
    poller = build_app(url, schema).poller(
        type_prefixes=["bench.%"], worker_id=f"bench-{schema}", **slots
    )
    if os.environ.get(METRICS_ENV) == "on":
        serve_metrics(poller, 0, "127.0.0.1")
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    profile_to = os.environ.get(PROFILE_ENV)
    if not profile_to:
        poller.run()
        gaps_to = os.environ.get(GAPS_ENV)
        if gaps_to:
            Path(gaps_to).write_text(json.dumps(_calls))
        return
    profiler = cProfile.Profile()
    profiler.runcall(poller.run)
    profiler.dump_stats(profile_to)


if __name__ == "__main__":
    main(sys.argv[1:])
