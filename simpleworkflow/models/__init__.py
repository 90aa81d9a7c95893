"""The plain, typed records simpleworkflow hands to its users, importable from here.

``runs``: a run and what is read about it (its events, signals, journal, a page of runs,
a publish); ``operator``: what operators and apps set up (the registry, rate limits,
topic subscriptions, cron schedules, the payload index); ``values``: a stored value that
cannot be read, and the one helper (:func:`to_dict`) that turns any record into the
JSON-ready dict the CLI, the API and the dashboard print.
"""

from simpleworkflow.models.operator import (
    PAYLOAD_INDEX_NAME,
    PayloadIndex,
    RateLimit,
    RegistryEntry,
    Schedule,
    Subscription,
)
from simpleworkflow.models.runs import (
    DEFAULT_MAX_ATTEMPTS,
    TERMINAL_STATUSES,
    WAITING_STATES,
    Event,
    JournalEntry,
    Published,
    Run,
    RunPage,
    RunStatus,
    RunValue,
    Signal,
    SignalSent,
)
from simpleworkflow.models.values import (
    Unreadable,
    iso,
    json_ready,
    shown,
    to_dict,
    unreadable_fields,
)

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "PAYLOAD_INDEX_NAME",
    "TERMINAL_STATUSES",
    "WAITING_STATES",
    "Event",
    "JournalEntry",
    "PayloadIndex",
    "Published",
    "RateLimit",
    "RegistryEntry",
    "Run",
    "RunPage",
    "RunStatus",
    "RunValue",
    "Schedule",
    "Signal",
    "SignalSent",
    "Subscription",
    "Unreadable",
    "iso",
    "json_ready",
    "shown",
    "to_dict",
    "unreadable_fields",
]
