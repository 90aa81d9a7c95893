"""The worker: claims due runs by type prefix, runs their handlers, records outcomes.

Import :class:`IntentPoller` from here (or from ``simpleworkflow``); the modules of this
package are its parts, each one concept.
"""

from simpleworkflow.worker.poller import RUNTIME, WATCH_INTERVAL, IntentPoller

__all__ = ["RUNTIME", "WATCH_INTERVAL", "IntentPoller"]
