"""OpenTelemetry traces of runs: ``pip install 'simpleworkflow[tracing]'``.

Register :class:`TracingObserver` on the ``App`` (or a client) and every start, attempt,
step and signal becomes a span, and a run started inside a traced request continues that
trace in whichever worker process runs it::

    from simpleworkflow import App
    from simpleworkflow.tracing import TracingObserver

    app = App(observers=[TracingObserver()])

Only ``opentelemetry-api`` is needed: without an SDK configured the spans cost next to
nothing and go nowhere, but the callers' trace context still travels with the runs. The
spans, their attributes (:mod:`simpleworkflow.tracing.attributes`) and links are
described in docs/tracing.md. This package is the only one that imports OpenTelemetry.
"""

from __future__ import annotations

try:
    import opentelemetry.trace  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "simpleworkflow.tracing needs OpenTelemetry's API: pip install 'simpleworkflow[tracing]'"
    ) from exc

from simpleworkflow.tracing import attributes
from simpleworkflow.tracing._observer import TracingObserver

__all__ = ["TracingObserver", "attributes"]
