"""simpleworkflow: a durable workflow system for Python services, on Postgres or SQLite."""

from simpleworkflow.client import AsyncClient, Client
from simpleworkflow.errors import (
    InvalidInput,
    RunNotFound,
    SimpleWorkflowError,
    WaitTimeout,
)
from simpleworkflow.models import Event, Run, RunPage, RunStatus

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "Client",
    "Event",
    "InvalidInput",
    "Run",
    "RunNotFound",
    "RunPage",
    "RunStatus",
    "SimpleWorkflowError",
    "WaitTimeout",
]
