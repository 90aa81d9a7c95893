"""simpleworkflow: a durable workflow system for Python services, on Postgres or SQLite.

Producers use :class:`Client` (or :class:`AsyncClient`) to start runs; workers register
handlers on an :class:`App` and run an :class:`IntentPoller`; handlers receive a
:class:`Context` for durable steps, sleeps, signals and children. The records the
clients return (:class:`Run`, :class:`Event`, :class:`JournalEntry`, :class:`Signal`,
:class:`SignalSent`, :class:`RegistryEntry`, :class:`Published`, :class:`Subscription`,
:class:`Schedule` ...)
are importable from here too.
"""

import logging

from simpleworkflow.app import App
from simpleworkflow.client import AsyncClient, Client
from simpleworkflow.durable.context import Context
from simpleworkflow.durable.loops import Break, Continue
from simpleworkflow.errors import (
    ChildFailed,
    InvalidInput,
    JoinError,
    PermanentError,
    RetryAfter,
    RollbackError,
    RunFinished,
    RunNotFound,
    SimpleWorkflowError,
    StepFailed,
    StepTimeout,
    WaitTimeout,
)
from simpleworkflow.models import (
    Event,
    JournalEntry,
    Published,
    RegistryEntry,
    Run,
    RunPage,
    RunStatus,
    Schedule,
    Signal,
    SignalSent,
    Subscription,
)
from simpleworkflow.observe import Observer
from simpleworkflow.retry import RetryPolicy
from simpleworkflow.version import __version__ as __version__
from simpleworkflow.worker import IntentPoller

# A library logs; the application decides where to. Without this, warnings would reach
# stderr through logging's last-resort handler in programs that never configured logging.
logging.getLogger("simpleworkflow").addHandler(logging.NullHandler())

__all__ = [
    "App",
    "AsyncClient",
    "Break",
    "ChildFailed",
    "Client",
    "Context",
    "Continue",
    "Event",
    "IntentPoller",
    "InvalidInput",
    "JoinError",
    "JournalEntry",
    "Observer",
    "PermanentError",
    "Published",
    "RegistryEntry",
    "RetryAfter",
    "RetryPolicy",
    "RollbackError",
    "Run",
    "RunFinished",
    "RunNotFound",
    "RunPage",
    "RunStatus",
    "Schedule",
    "Signal",
    "SignalSent",
    "SimpleWorkflowError",
    "StepFailed",
    "StepTimeout",
    "Subscription",
    "WaitTimeout",
]
