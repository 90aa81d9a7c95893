"""Handlers by workflow type: which function runs each type, and with what policy.

The worker reads these; :class:`~simpleworkflow.App` adds the clients and workers made
from them. Kept apart so that the worker need not import the module that imports it."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from simpleworkflow import durations, errors, limits, names, observe
from simpleworkflow.codec import Codec
from simpleworkflow.limits import NO_LIMITS, RateSpec, TypeLimits
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
    #: The limits its declaration names (written to the store when a worker starts).
    limits: TypeLimits = NO_LIMITS
    #: The app's codec: how its payload, steps' results and values are written and read.
    codec: Codec | None = None

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
        codec: Codec | None = None,
    ) -> None:
        self.database_url = database_url
        self._codec = codec
        self.schema = schema
        self.retry = retry
        self.observers = observe.Observers(observers)
        self._definitions: dict[str, Definition] = {}
        self._schedules: dict[str, ScheduleSpec] = {}
        self._rate_limits: dict[str, RateSpec] = {}

    @property
    def codec(self) -> Codec | None:
        """Writes the types JSON lacks and reads them back (``simpleworkflow.codec``); its
        clients get the same. ``None``: strict JSON. Set once, when the app is made: its
        handlers and its clients must agree."""
        return self._codec

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
        concurrency: int | None = None,
        key_concurrency: int | None = None,
        rate_limit: str | None = None,
    ) -> Callable[[F], F]:
        """Register the decorated function as the handler of ``type``.

        ``version`` names the code: a run records the version it started on, and a worker
        only resumes runs of a version it lists (``version`` or ``compatible``), so a
        deploy that changes the steps of a workflow never replays old runs wrongly.
        ``concurrency``, ``key_concurrency`` and ``rate_limit`` (a name declared with
        :meth:`rate_limit`) are the type's flow-control limits, written to the store by
        each worker that starts; one left out is left as stored (docs/flow-control.md).
        """
        declared = self._type_limits(type, concurrency, key_concurrency, rate_limit)

        def decorate(fn: F) -> F:
            self.register(
                type,
                fn,
                retry=retry,
                timeout=timeout,
                version=version,
                compatible=compatible,
                limits=declared,
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
        limits: TypeLimits | None = None,
    ) -> Definition:
        """Register ``fn`` (``def`` or ``async def``, taking ``payload`` and maybe ``ctx``);
        ``limits`` as :meth:`workflow` declares them."""
        names.validate_type(type)
        versions = (version, *compatible)
        if not all(isinstance(v, str) and v and len(v) <= 64 for v in versions):
            raise errors.InvalidArgument("versions must be non-empty strings of at most 64 chars")
        if type in self._definitions:
            raise errors.InvalidArgument(f"a handler for {type!r} is already registered")
        if (retry or self.retry).timeout is not None:
            raise errors.InvalidArgument(
                f"the retry policy of {type!r} has a timeout, which bounds a step's try: "
                "give it to ctx.step, and bound the whole handler with timeout="
            )
        definition = Definition(
            type=type,
            fn=fn,
            retry=retry or self.retry,
            timeout=None if timeout is None else durations.to_seconds(timeout, what="timeout"),
            is_async=asyncio.iscoroutinefunction(fn),
            takes_context=takes_context(type, fn),
            version=version,
            compatible=tuple(compatible),
            limits=limits or NO_LIMITS,
            codec=self.codec,
        )
        self._definitions[type] = definition
        return definition

    @property
    def definitions(self) -> Mapping[str, Definition]:
        return self._definitions

    def rate_limit(
        self, name: str, rate: str | tuple[int, durations.Duration], *, per_key: bool = False
    ) -> RateSpec:
        """Declare the rate limit ``name`` (``"10/s"``, ``"600/m"``, ``"5/10s"``, per
        concurrency key if ``per_key``) for types (``@app.workflow(..., rate_limit=name)``)
        and steps (``ctx.rate_limit(name)``); a worker of this app writes it to the store
        when it starts. Checked here: a bad rate fails at import."""
        spec = limits.rate_spec(name, rate, per_key)
        if spec.name in self._rate_limits:
            raise errors.InvalidArgument(f"a rate limit named {spec.name!r} is already declared")
        self._rate_limits[spec.name] = spec
        return spec

    @property
    def rate_limits(self) -> Mapping[str, RateSpec]:
        """The rate limits declared with :meth:`rate_limit`, by name."""
        return self._rate_limits

    def _type_limits(
        self, type: str, concurrency: int | None, key_concurrency: int | None, rate: str | None
    ) -> TypeLimits:
        return limits.type_limits(
            type,
            concurrency=concurrency,
            key_concurrency=key_concurrency,
            rate_limit=rate,
            declared_rates=self._rate_limits,
        )

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
            codec=self.codec,
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
