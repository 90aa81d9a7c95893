"""Handlers by workflow type: which function runs each type, and with what policy.

The worker reads these; :class:`~simpleworkflow.App` adds the clients and workers made
from them. Kept apart so that the worker need not import the module that imports it."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from simpleworkflow import durations, errors, names, observe
from simpleworkflow.retry import DEFAULT_RUN_POLICY, RetryPolicy
from simpleworkflow.schedules import ScheduleSpec, define

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Definition:
    """A registered handler and how to run it."""

    type: str
    fn: Callable[..., Any]
    retry: RetryPolicy
    timeout: float | None
    is_async: bool
    takes_context: bool
    #: Stamped on runs at their first claim; runs stamped with another version are left
    #: alone unless it is listed in ``compatible``.
    version: str = "1"
    compatible: tuple[str, ...] = ()

    @property
    def known_versions(self) -> tuple[str, ...]:
        return (self.version, *self.compatible)


class Handlers:
    """Handlers by workflow type, the database they work against, and the observers
    that watch their runs; see :class:`~simpleworkflow.App`."""

    def __init__(
        self,
        database_url: str | None = None,
        *,
        schema: str | None = None,
        retry: RetryPolicy = DEFAULT_RUN_POLICY,
        observers: Iterable[observe.Observer] = (),
    ) -> None:
        self.database_url = database_url
        self.schema = schema
        self.retry = retry
        self.observers = observe.Observers(observers)
        self._definitions: dict[str, Definition] = {}
        self._schedules: dict[str, ScheduleSpec] = {}

    def observe(self, observer: observe.Observer) -> observe.Observer:
        """Register ``observer`` on the workers of this app; returns it."""
        self.observers.add(observer)
        return observer

    def workflow(
        self,
        type: str,
        *,
        retry: RetryPolicy | None = None,
        timeout: durations.Duration | None = None,
        version: str = "1",
        compatible: Iterable[str] = (),
    ) -> Callable[[F], F]:
        """Register the decorated function as the handler of ``type``.

        ``version`` names the code: a run records the version it started on, and a worker
        only resumes runs of a version it lists (``version`` or ``compatible``), so a
        deploy that changes the steps of a workflow never replays old runs wrongly.
        """

        def decorate(fn: F) -> F:
            self.register(
                type, fn, retry=retry, timeout=timeout, version=version, compatible=compatible
            )
            return fn

        return decorate

    def register(
        self,
        type: str,
        fn: Callable[..., Any],
        *,
        retry: RetryPolicy | None = None,
        timeout: durations.Duration | None = None,
        version: str = "1",
        compatible: Iterable[str] = (),
    ) -> Definition:
        """Register ``fn`` (``def`` or ``async def``, taking ``payload`` and maybe ``ctx``)."""
        names.validate_type(type)
        versions = (version, *compatible)
        if not all(isinstance(v, str) and v and len(v) <= 64 for v in versions):
            raise errors.InvalidArgument("versions must be non-empty strings of at most 64 chars")
        if type in self._definitions:
            raise errors.InvalidArgument(f"a handler for {type!r} is already registered")
        definition = Definition(
            type=type,
            fn=fn,
            retry=retry or self.retry,
            timeout=None if timeout is None else durations.to_seconds(timeout, what="timeout"),
            is_async=asyncio.iscoroutinefunction(fn),
            takes_context=takes_context(type, fn),
            version=version,
            compatible=tuple(compatible),
        )
        self._definitions[type] = definition
        return definition

    @property
    def definitions(self) -> Mapping[str, Definition]:
        return self._definitions

    def schedule(
        self,
        type: str,
        *,
        cron: str,
        tz: str = "UTC",
        name: str | None = None,
        payload: Mapping[str, Any] | None = None,
        missed: str = "skip",
        priority: int = 100,
        max_attempts: int | None = None,
    ) -> Callable[[F], F]:
        """Start a run of ``type`` at every tick of ``cron`` in time zone ``tz`` (see
        docs/schedules.md); a worker of this app writes the schedule to the store when it
        starts. Declared by the call itself; the decorated function also becomes the
        handler of ``type``, unless it is already (``@app.schedule`` above
        ``@app.workflow``). ``name`` defaults to the type; ``missed`` is ``skip``,
        ``once`` or ``each``."""
        spec = define(
            name or type,
            type,
            cron=cron,
            tz=tz,
            payload=payload,
            missed=missed,
            priority=priority,
            max_attempts=max_attempts,
        )
        if spec.name in self._schedules:
            raise errors.InvalidArgument(f"a schedule named {spec.name!r} is already declared")
        self._schedules[spec.name] = spec

        def decorate(fn: F) -> F:
            known = self._definitions.get(type)
            if known is None:
                self.register(type, fn)
            elif known.fn is not fn:
                raise errors.InvalidArgument(f"a handler for {type!r} is already registered")
            return fn

        return decorate

    @property
    def schedules(self) -> Mapping[str, ScheduleSpec]:
        """The schedules declared with :meth:`schedule`, by name."""
        return self._schedules

    def types_matching(self, prefixes: Iterable[str]) -> list[str]:
        """The registered types that any of the ``'billing.%'``-style prefixes selects."""
        chosen = list(prefixes)
        return sorted(
            t for t in self._definitions if any(names.prefix_matches(p, t) for p in chosen)
        )


def takes_context(type_name: str, fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is called as ``fn(payload, ctx)`` rather than ``fn(payload)``.

    A handler that can be called neither way is refused here, when it is registered:
    called by a worker, it would fail every attempt with a ``TypeError`` that looks like
    a transient error and is retried for minutes.
    """
    if not callable(fn):
        raise errors.ConfigurationError(
            f"the handler of {type_name!r} must be a function (def or async def), not {fn!r:.60}"
        )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins do not say: call them with both
        return True
    if _binds(signature, 2):
        return True
    if _binds(signature, 1):
        return False
    raise errors.ConfigurationError(
        f"the handler of {type_name!r}, {_describe(fn, signature)}, cannot be called with the "
        "payload: a handler takes the payload, and may take a Context second, as in "
        "`def handler(payload)` or `def handler(payload, ctx)`"
    )


def _binds(signature: inspect.Signature, positional: int) -> bool:
    try:
        signature.bind(*range(positional))
    except TypeError:
        return False
    return True


def _describe(fn: Callable[..., Any], signature: inspect.Signature) -> str:
    """``name(params) (file, line N)``, as a traceback would point at it."""
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    code = getattr(inspect.unwrap(fn), "__code__", None)
    where = "" if code is None else f" ({code.co_filename}, line {code.co_firstlineno})"
    return f"{name}{signature}{where}"
