"""The public surface is pinned: adding or removing a name must be a deliberate change here."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import inspect
import typing

import simpleworkflow
from simpleworkflow import client, errors

PUBLIC_NAMES = [
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


def test_all_is_pinned() -> None:
    assert simpleworkflow.__all__ == PUBLIC_NAMES


def test_all_is_sorted_and_importable() -> None:
    assert simpleworkflow.__all__ == sorted(simpleworkflow.__all__)
    for name in simpleworkflow.__all__:
        assert getattr(simpleworkflow, name) is not None, name


def test_star_import_gives_exactly_all() -> None:
    scope: dict[str, object] = {}
    exec("from simpleworkflow import *", scope)
    assert sorted(name for name in scope if name != "__builtins__") == PUBLIC_NAMES


def test_every_error_derives_from_one_base() -> None:
    """``except SimpleWorkflowError`` catches every error we raise. (Control-flow signals
    derive from ``BaseException`` on purpose, so that ``except Exception`` cannot eat them.)"""
    classes = [
        value
        for value in vars(errors).values()
        if inspect.isclass(value) and issubclass(value, Exception)
    ]
    assert len(classes) >= 10
    for cls in classes:
        assert issubclass(cls, errors.SimpleWorkflowError), cls
    assert issubclass(errors.InvalidInput, ValueError)
    assert issubclass(errors.IdempotencyConflict, errors.InvalidInput)
    assert issubclass(errors.RunNotFound, LookupError)
    assert issubclass(errors.WaitTimeout, TimeoutError)


def test_version_matches_the_distribution() -> None:
    assert simpleworkflow.__version__ == importlib.metadata.version("simpleworkflow")


def test_start_returns_runs_that_say_whether_they_were_created() -> None:
    """``start`` and ``start_many`` (both clients) return plain ``Run``s whose ``created``
    says whether the call created the run or found it under its idempotency key; runs
    read back have ``None``, and the flag never changes whether two runs are equal."""
    created = {field.name: field for field in dataclasses.fields(simpleworkflow.Run)}["created"]
    assert created.default is None and created.compare is False
    for face in (simpleworkflow.Client, simpleworkflow.AsyncClient):
        assert typing.get_type_hints(face.start)["return"] is simpleworkflow.Run
        assert typing.get_type_hints(face.start_many)["return"] == list[simpleworkflow.Run]


def test_start_options_are_declared_once_and_typed_for_both_clients() -> None:
    """``start``'s keywords are :class:`StartOptions`, so that mypy checks them in user code
    and a new option is declared in one place."""
    for face in (simpleworkflow.Client, simpleworkflow.AsyncClient):
        hints = typing.get_type_hints(face.start, include_extras=True)
        assert hints["options"] == typing.Unpack[client.StartOptions]
    names = [
        "concurrency_key",
        "deadline",
        "debounce",
        "delay",
        "idempotency_key",
        "max_attempts",
        "priority",
        "retention",
        "run_at",
    ]
    assert sorted(client.OPTIONS) == names
