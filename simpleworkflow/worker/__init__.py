"""The worker: claims due runs by type prefix, runs their handlers, records outcomes.

Import :class:`IntentPoller` from here (or from ``simpleworkflow``); the modules of this
package are its parts, each one concept.
"""

from simpleworkflow.worker.options import RUNTIME, WATCH_INTERVAL, WorkerOptions, WorkerSettings
from simpleworkflow.worker.poller import IntentPoller
from simpleworkflow.worker.supervisor import Loop, Service

__all__ = [
    "RUNTIME",
    "WATCH_INTERVAL",
    "IntentPoller",
    "Loop",
    "Service",
    "WorkerOptions",
    "WorkerSettings",
]
