"""The plain, typed records simpleworkflow hands to its users, importable from here.

``runs``: a run and what is read about it (its events, signals, journal, a page of runs,
a publish); ``operator``: what operators and apps set up (the registry, rate limits,
topic subscriptions, cron schedules, the payload index); ``dicts``: the one helper that
turns any of them into the JSON-ready dict the CLI, the API and the dashboard print.
"""

from simpleworkflow.models.runs import (
    TERMINAL_STATUSES,
    WAITING_STATES,
    Event,
    Published,
    Run,
    RunPage,
    RunStatus,
    Signal,
    Unreadable,
    iso,
    shown,
    unreadable_fields,
)

__all__ = [
    "TERMINAL_STATUSES",
    "WAITING_STATES",
    "Event",
    "Published",
    "Run",
    "RunPage",
    "RunStatus",
    "Signal",
    "Unreadable",
    "iso",
    "shown",
    "unreadable_fields",
]
