"""Prometheus metrics for simpleworkflow: ``pip install 'simpleworkflow[metrics]'``.

Counters and histograms come from an observer (:class:`MetricsObserver`) that counts
what this process sees happen; gauges are read from the database at scrape time
(:class:`StoreGauges`), so every process agrees on them. :class:`Metrics` puts both in
one registry and serves it::

    from simpleworkflow.metrics import Metrics

    metrics = Metrics()                  # the app's database, as everywhere
    app.observe(metrics.observer)        # every worker made from the app counts
    metrics.serve(9100)                  # http://host:9100/metrics, from a thread

``simpleworkflow worker ... --metrics-port 9100`` does the same for a worker process;
a web application mounts :meth:`Metrics.asgi_app` at ``/metrics``. The names, and how
several processes add up, are in docs/observability.md. Only this package imports
``prometheus_client``: the rest of simpleworkflow works without it.
"""

from simpleworkflow import errors

try:
    import prometheus_client  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the install
    raise errors.ConfigurationError(
        "metrics need prometheus_client: pip install 'simpleworkflow[metrics]'"
    ) from exc

from simpleworkflow.metrics.gauges import StoreGauges
from simpleworkflow.metrics.observer import BUCKETS, MAX_NAMES, OTHER, MetricsObserver
from simpleworkflow.metrics.serving import Metrics, MetricsApp, MetricsServer

__all__ = [
    "BUCKETS",
    "MAX_NAMES",
    "OTHER",
    "Metrics",
    "MetricsApp",
    "MetricsObserver",
    "MetricsServer",
    "StoreGauges",
]
