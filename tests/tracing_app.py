"""A traced app: the workflow tests/processes/test_tracing.py follows, in its process or
in a worker's.

``python -m simpleworkflow worker tracing_app:app`` (with ``tests`` on the path) runs it in
a worker process; with ``SIMPLEWORKFLOW_TEST_SPANS`` set, that process installs the
OpenTelemetry SDK and writes each span it ends to that file, one JSON object per line,
for the test to read back.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

from simpleworkflow import App, Context, RetryPolicy
from simpleworkflow.tracing import TracingObserver

ORDER = "trace.order.v1"
SPANS_ENV = "SIMPLEWORKFLOW_TEST_SPANS"
FAST = RetryPolicy(backoff="fixed", base=0.1, jitter=0)
log = logging.getLogger("shop.orders")

_charges: collections.Counter[str] = collections.Counter()


def charge(order: str) -> str:
    """Fails the first time for each order: a step retried in a later attempt."""
    log.info("charging order %s", order)
    _charges[order] += 1
    if _charges[order] == 1:
        raise ConnectionError("the card service hiccuped")
    return f"ch_{order}"


def build(app: App) -> App:
    """The order workflow: a step retried once, a sleep, a wait for a signal, and a first
    attempt of the run that fails at its end (a retry of the whole run)."""

    @app.workflow(ORDER, retry=FAST)
    async def order(payload: Any, ctx: Context) -> dict[str, Any]:
        log.info("taking order %s", payload["order"])
        charged = await ctx.step("charge", charge, payload["order"], retry=FAST)
        await ctx.sleep("cool-off", 0.2)
        approval = await ctx.wait_for_event("approval", event="approve", timeout="1m")
        if ctx.attempt == 1:
            raise RuntimeError("the first attempt fails at its end")
        return {"charged": charged, "by": approval["by"]}

    return app


def _install_sdk(path: str) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class FileExporter(SpanExporter):
        """Each span as one JSON line, appended as it ends."""

        def __init__(self) -> None:
            self._lock = threading.Lock()

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            with self._lock, open(path, "a") as out:
                for span in spans:
                    out.write(span.to_json(indent=None) + "\n")
            return SpanExportResult.SUCCESS

    provider = TracerProvider(resource=Resource.create({"service.name": "worker"}))
    provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
    trace.set_tracer_provider(provider)


if os.environ.get(SPANS_ENV):
    _install_sdk(os.environ[SPANS_ENV])

app = build(App(observers=[TracingObserver()]))
